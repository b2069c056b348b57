"""Tuning over saved groundings, without generating text.

Threshold sweeps and policy ablations (``plguard sweep``, ``plguard ablate``).
"""

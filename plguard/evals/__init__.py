"""Offline evaluation studies over one shared layer (:mod:`plguard.records`).

At the top: the XSTest data, metrics, argument types and the command registrations. Each
study has its folder: ``xstest/``, ``gold/``, ``quality/``, ``tuning/``, ``attacks/``.
Submodules are imported on use; importing this package loads nothing heavy.
"""

"""Learned heads: per-predicate linear heads over the grounding model's hidden state.

``artefact`` (the file format and its checks) and ``apply`` (what the Grounder uses)
import only numpy; ``features``, ``fit`` and ``train`` (fitting: scikit-learn) are
imported when a fit runs.
"""

"""Policies from plain English (issue 55): spans, drafts, their agreement, a bundle to vet.

``spans`` splits a policy document into citable spans; ``schema`` is what a model proposes
for a span (structured output); ``write`` turns predicates and rules into a normal bundle;
agreement between redundant drafts lives with the other circuit tools in
:mod:`plguard.policy.agree`.
"""

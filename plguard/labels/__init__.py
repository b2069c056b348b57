"""Labelled data read by product code and by the studies alike.

XSTest's prompts and labelled completions (``xstest``), its committed dev/test split
(``splits``) and gold predicate values from a bundle's ``gold.yaml`` (``gold``). The heads
trainer (:mod:`plguard.heads`) reads them, so they live outside :mod:`plguard.evals`.
"""

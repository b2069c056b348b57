"""Labelled data read by the studies and by heads training alike.

XSTest's prompts and labelled completions (``xstest``), its committed dev/test split
(``splits``) and gold predicate values from a bundle's ``gold.yaml`` (``gold``). The heads
trainer (:mod:`plguard_lab.training`) reads them, so they live outside the studies.
"""

"""The decision-quality study (docs/quality.md).

Dev/test splits, grounding labelled pairs once for every policy, calibration and
threshold fitting on dev, and test-split reports against the one-question classifier and
the LLM judge.
"""

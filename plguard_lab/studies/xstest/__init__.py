"""The XSTest study.

Methods, scorers, the resumable runner and its Ray shards, reports, scorer validation and
the guard as a classifier of the labelled completions. Submodules are imported on use.
"""

"""The hazards bundle study (issue 26): per-category request detection and false positives."""

"""The drafting study (issue 55, item 5): plain-English policies drafted, against references."""

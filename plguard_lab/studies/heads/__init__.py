"""The learned-heads study: heads vs zero-shot on the guard-labelled test subset."""

"""The read study: every predicate read from the text that carries its evidence.

See README.md: alone states of thirteen sources, heads chosen by leave-one-source-out
beside a lexical baseline, and the unseen-passage checks.
"""

"""The read study's corpus: which sources, how many items of each, seeded.

Every source of the heads corpus (:mod:`plguard_lab.training.corpus`), each cut to at
most :data:`CAP` items (a preference pair counts once; XSTest is never cut) by a hash of
the uid, so extraction, fitting and reports read the same items and a larger cap holds
every item of a smaller one.
"""

from __future__ import annotations

from collections.abc import Sequence

from plguard_lab.training.corpus import CorpusItem, load_corpus

READ_SOURCES: tuple[str, ...] = (
    "xstest", "ailuminate", "coconot", "coconot_plain", "coconot_hazards", "plguard_s14",
    "hh_harmless", "answer_texts", "catqa", "aart", "gptfuzz", "alpaca", "hatecheck",
    "multijail", "xsafety", "diasafety", "davidson")
# Not here: plguard_passages, the developers' dev passages, named with --sources to use
# them (eval/results/read-passages-refit: fitted with them, the content heads could not
# ship; docs/quality.md, *Dev passages of our own*).
CAP = 2500


def read_corpus(sources: Sequence[str] = READ_SOURCES, split: str = "dev",
                cap: int = CAP) -> list[CorpusItem]:
    """The study's items of ``sources`` in ``split`` (``all``: both, each cut alone)."""
    if split == "all":  # the same items as dev and test read one at a time
        return [*read_corpus(sources, "dev", cap), *read_corpus(sources, "test", cap)]
    return load_corpus(sources, split, limit_per_source=cap)


__all__ = ["CAP", "READ_SOURCES", "read_corpus"]

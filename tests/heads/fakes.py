"""A stand-in for plguard_lab.training.features.Extractor over synthetic states (fit tests)."""

from __future__ import annotations


class FakeStore:
    def __init__(self, feats):
        self.feats = feats

    def get(self, keys):
        return {k: self.feats[k] for k in keys if k in self.feats}


class FakeExtractor:
    """The parts of an Extractor a fit reads, over synthetic states."""

    layers = (1,)
    with_questions = with_pairs = True
    with_pool = False  # a test with pool states sets it

    def __init__(self, feats):
        self.store = FakeStore(feats)
        self.grounder = type("G", (), {"question_block": staticmethod(lambda spec, q: "Q")})()

    def asks(self, scope):
        return self.with_questions

    def questions(self, scope):
        return ["Q"]

    def keys(self, it):
        return [f"{it.uid}/prefix", f"{it.uid}/q"]

    def question_key(self, it, block):
        return self.keys(it)[1]

    def pair_key(self, it):
        return f"{it.uid}/pair"

    def pool_key(self, it):
        return f"{it.uid}/pool"

    def state_key(self, it, readout):
        return {"prefix": self.keys(it)[0], "pool": self.pool_key(it),
                "pair_prefix": self.pair_key(it)}[readout]

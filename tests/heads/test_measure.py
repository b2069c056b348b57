"""plguard_lab.training.measure: a heads file read source by source, as the fit measures its own."""

from __future__ import annotations

import numpy as np

from plguard.heads.artefact import Head, HeadsFile
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Feature
from tests.heads.fakes import FakeExtractor


def test_scores_by_source_reads_the_heads_readout_per_source_and_pairs():
    """State dim 0 carries the label in source ``a`` and is reversed in ``b``; dim 1 is
    noise. A question head on dim 0 reads ``a`` at 1.0 and ``b`` at 0.0, a prefix head on
    dim 1 near chance; the preference pairs are ordered by dim 0, so pairwise 1.0."""
    from plguard.policy import load_policy
    from plguard_lab.training.measure import scores_by_source

    policy = load_policy("minimal")
    rng = np.random.default_rng(0)
    items, feats = [], {}
    for i in range(80):
        src, label = ("a", "b")[i % 2], (i // 2) % 2
        items.append(CorpusItem(f"{src}/{i}", src, str(i), f"r{i}", f"x{i}", {}))
        sign = 1.0 if src == "a" else -1.0
        state = np.array([[sign * (2 * label - 1), rng.normal()]], dtype=np.float32)
        for k in ("prefix", "q"):
            feats[f"{src}/{i}/{k}"] = Feature(state, 0.0, 0.0)
    for j in range(10):  # hh-style pairs: the more harmful reply has the larger dim 0
        for role, v in (("rejected", 1.0), ("chosen", -1.0)):
            it = CorpusItem(f"hh/{j}/{role}", "hh", str(j), "q", f"y{j}{role}",
                            {"pair": f"p{j}", "pair_role": role})
            items.append(it)
            feats[f"{it.uid}/prefix"] = feats[f"{it.uid}/q"] = Feature(
                np.array([[v, 0.0]], dtype=np.float32), 0.0, 0.0)
    labels = {s.name: np.array([float((int(it.uid.split("/")[1]) // 2) % 2)
                                if it.source != "hh" else np.nan for it in items])
              for s in policy.predicates}
    heads = {"response_provides_harmful_instructions":
             Head("question", 1, "head", np.array([4.0, 0.0]), 0.0, (1.0, 0.0)),
             "response_refuses": Head("prefix", 1, "head", np.array([0.0, 1.0]), 0.0,
                                      (1.0, 0.0))}
    hf = HeadsFile("h.json", "0" * 12, heads, (1,), None, None, "g1", policy.id)
    out = scores_by_source(policy, FakeExtractor(feats), items, hf, labels,
                           pairwise={"response_provides_harmful_instructions"})
    assert set(out) == set(heads)  # unheaded predicates are not measured
    harm = out["response_provides_harmful_instructions"]
    assert harm["a"] == 1.0 and harm["b"] == 0.0 and harm["hh"] == 1.0
    assert 0.3 < out["response_refuses"]["a"] < 0.7 and "hh" not in out["response_refuses"]

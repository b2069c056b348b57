"""Content-head variants beside the shipped prior, judged by held-out answer source (dev).

    python scripts/results/read_content_variants.py > content-variants.txt

(the recorded output is eval/results/read-embedded/content-variants.txt).

Reads minimal's ``response_provides_harmful_instructions`` rows from the feature store
(``scripts/results/read.sh extract`` first) and, for each variant, prints every held-out
answer source's figure (as :mod:`plguard_lab.studies.read.fit` computes them) and then,
as a report only, how the variant's head (fitted on all of dev) ranks the unseen passages
(tests/data/unseen: harmful short and long answers against the benign long ones, and how
many harmful ones score above every benign one). Variants:

* ``+requests``: the request rows of the request sets (labelled by ``request_is_harmful``)
  added to the answer windows as training rows, at weight ``a`` each (many more topics of
  harm than the answers hold);
* ``concat``: the mean states of three layers side by side;
* ``lexical``: the read study's lexical baseline (TF-IDF word and character n-grams, a
  logistic regression; :mod:`plguard_lab.training.lexical`) on the same answer windows.

Nothing here is shipped: the read study's rule (the prior unless a candidate beats it by
more than 0.03 on the worst or the mean held-out source) keeps the prior for all of them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from plguard.backends import load_backend
from plguard.config import ModelConfig
from plguard.policy import load_policy
from plguard.stats import auroc
from plguard_lab.studies.read.corpus import READ_SOURCES, read_corpus
from plguard_lab.training.alone_features import AloneExtractor
from plguard_lab.training.alone_fit import RidgeFolds, Rows, build_rows, heldout
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import FeatureStore, default_store_path
from plguard_lab.training.fit import labels_for, pairs_of

UNSEEN = Path(__file__).resolve().parents[2] / "tests" / "data" / "unseen" / "passages.yaml"
CONTENT = "response_provides_harmful_instructions"
REQUEST_SETS = ["xstest", "ailuminate", "coconot", "plguard_s14", "catqa", "aart", "gptfuzz",
                "alpaca"]
VARIANTS = [  # name, layers, request sources added, their weight
    ("prior mean@15", [15], [], 1.0),
    ("+requests a=1", [15], REQUEST_SETS, 1.0),
    ("+requests a=0.3", [15], REQUEST_SETS, 0.3),
    ("+requests a=0.1", [15], REQUEST_SETS, 0.1),
    ("concat 9,15,21", [9, 15, 21], [], 1.0),
    ("concat 12,15,18", [12, 15, 18], [], 1.0),
]


def main() -> None:
    backend = load_backend(ModelConfig.model_validate({"path": "embedded"}))
    ex = AloneExtractor(backend, FeatureStore(default_store_path(backend)))
    items = read_corpus(READ_SOURCES, "dev")
    lab = labels_for(load_policy("minimal"), items)
    ans = build_rows("answer", ex, items, lab[CONTENT], pairs_of(items))
    req = build_rows("request", ex, items, lab["request_is_harmful"])
    data = yaml.safe_load(UNSEEN.read_text(encoding="utf-8"))
    unseen = ([(e["short_answer"], 1, "short") for e in data["harmful"]]
              + [(e["long_answer"], 1, "long") for e in data["harmful"]]
              + [(e["answer"], 0, "benign") for e in data["benign"]])
    ex.run([CorpusItem(f"unseen{i}", "unseen", str(i), "", a)
            for i, (a, _, _) in enumerate(unseen)], requests=False, progress=False)
    ust, uowner = ex.window_states([a for a, _, _ in unseen], "mean")
    L = list(ex.layers)
    print(f"dev: {len(ans.y)} answers ({len(ans.item)} windows), {len(req.y)} requests; "
          f"unseen: {len(unseen)} answers")
    for name, layers, sources, alpha in VARIANTS:
        X, rows = _merged(ans, req, L, layers, sources)
        rf = RidgeFolds(X, rows)
        if alpha != 1.0:
            isreq = np.char.startswith(rows.row_groups.astype(str), "req:")
            rf.w = rf.w * np.where(isreq, alpha, 1.0)
            for s in list(rf.stats):
                rf.stats[s] = rf._sums((rows.row_groups == s) & rf.ok)
        m = {k: v for k, v in heldout(rows, rf.fitter(1.0)).metrics.items()
             if not k.startswith("req:")}
        w, b = rf.head(frozenset(), 1.0)
        s = np.concatenate([ust[:, L.index(x), :] for x in layers], 1).astype(np.float64) @ w + b
        per = np.full(len(unseen), -np.inf)
        np.maximum.at(per, uowner, s)
        _report(name, m, per, unseen)
    _report("lexical", *lexical(ans, unseen, ex), unseen)


def lexical(ans: Rows, unseen: list[tuple[str, int, str]], ex: AloneExtractor
            ) -> tuple[dict[str, float], np.ndarray]:
    """The lexical baseline's held-out figures, and its scores of the unseen answers.

    Vocabulary and regression as :func:`plguard_lab.training.lexical.lexical_fitter` fits
    them (on every dev window, item weights), then applied to each unseen window's text.
    """
    from sklearn.linear_model import LogisticRegression

    from plguard_lab.training.lexical import LEXICAL_C, lexical_fitter, vectorizer

    metrics = heldout(ans, lexical_fitter(ans)).metrics
    vec = vectorizer()
    X = vec.fit_transform(ans.texts).tocsr()
    m = ~np.isnan(ans.row_y)
    model = LogisticRegression(C=LEXICAL_C, max_iter=2000).fit(
        X[m], ans.row_y[m].astype(int), sample_weight=ans.row_weight[m])
    texts, owner = [], []
    for i, (a, _, _) in enumerate(unseen):
        for w in ex.windows(a):
            texts.append(w.prefix[w.pool[0]:w.pool[1]] if w.pool else "")
            owner.append(i)
    s = model.decision_function(vec.transform(texts))
    per = np.full(len(unseen), -np.inf)
    np.maximum.at(per, np.asarray(owner), s)
    return metrics, per


def _report(name: str, m: dict[str, float], per: np.ndarray,
            unseen: list[tuple[str, int, str]]) -> None:
    judged = {k: v for k, v in m.items() if k != "hh_harmless"}
    print(f"{name:18s} worst {min(m.values()):.3f} mean {np.mean(list(m.values())):.3f} "
          f"(without hh_harmless {min(judged.values()):.3f} / "
          f"{np.mean(list(judged.values())):.3f}): "
          + " ".join(f"{k} {v:.3f}" for k, v in sorted(m.items())))
    y = np.array([t for _, t, _ in unseen])
    kind = np.array([k for _, _, k in unseen])
    top = per[kind == "benign"].max()
    for k in ("short", "long"):
        sel = (kind == k) | (kind == "benign")
        print(f"    unseen {k}: AUROC {auroc(y[sel], per[sel]):.3f}, "
              f"{int((per[kind == k] > top).sum())}/24 above every benign answer")


def _merged(ans: Rows, req: Rows, L: list[int], layers: list[int], sources: list[str]
            ) -> tuple[np.ndarray, Rows]:
    """The answer rows with the chosen request rows appended (source ``req:<name>``)."""
    def feat(r: Rows) -> np.ndarray:
        return np.concatenate([r.states["mean"][:, L.index(x), :] for x in layers], 1)

    idx = np.flatnonzero(np.isin(req.groups, sources))
    rmask = np.isin(req.item, idx)
    remap = -np.ones(len(req.y), dtype=int)
    remap[idx] = np.arange(len(idx)) + len(ans.y)
    X = np.concatenate([feat(ans), feat(req)[rmask]]).astype(np.float64)
    rows = Rows("answer", ans.layers, ans.texts + [req.texts[i] for i in np.flatnonzero(rmask)],
                np.concatenate([ans.item, remap[req.item[rmask]]]),
                np.concatenate([ans.y, req.y[idx]]),
                np.concatenate([ans.groups.astype(object),
                                np.array(["req:" + str(g) for g in req.groups[idx]],
                                         dtype=object)]).astype(str),
                ans.uids + [req.uids[i] for i in idx],
                ans.prompts + [req.prompts[i] for i in idx], {}, ans.pairs)
    return X, rows


if __name__ == "__main__":
    main()

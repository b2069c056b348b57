"""Does one category-agnostic harmful-request head transfer across sources? (issue 40)

    OMP_NUM_THREADS=2 python scripts/results/general_harm_probe.py \
        [--two-class-only] [--combine] [--model M]

On a model's (default: the embedded one) cached question-free request states (prefix and pool, every
default layer; what ``scripts/results/hazards.sh features`` stores), a logistic head learns
each dev request's own label (unsafe vs safe or plain) from the hazards study's sources.
Held out by source: each two-class source (XSTest, CoCoNot, CoCoNot hazards, the S14
requests) is scored by a head fitted on the other sources, AUROC within it. Then, fitted on
all of dev, the test part: AUROC within XSTest, AILuminate's prompts against the safe
requests of the two-class sources, and CoCoNot's plain requests and the benign answer
texts against their unsafe ones. ``--two-class-only`` trains on the two-class sources alone,
so a head cannot tell harm apart by which source a text comes from. ``--combine``
reads every readout and layer at once instead of one at a time: the mean of the single
heads' standardised logits (``ensemble``) and one head over each readout's layers side by
side (``concat-prefix``, ``concat-pool``), at three strengths.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

TWO_CLASS = ("coconot", "coconot_hazards", "plguard_s14", "xstest")
ONE_CLASS = ("ailuminate", "coconot_plain", "answer_texts")
STRENGTHS = (0.003, 0.03)
# Wider heads (--combine: ten readouts at once) may want a stronger penalty, so one more.
COMBINE_STRENGTHS = (0.0003, *STRENGTHS)


def main() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from plguard.backends import load_backend
    from plguard.config import GuardConfig
    from plguard.policy import load_policy
    from plguard_lab.metrics import auroc
    from plguard_lab.training.corpus import load_corpus
    from plguard_lab.training.features import (
        Extractor,
        FeatureStore,
        default_layers,
        default_store_path,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--two-class-only", action="store_true")
    ap.add_argument("--combine", action="store_true",
                    help="every readout and layer at once (ensemble, concatenation)")
    ap.add_argument("--model", default="embedded", help="generator.path of the model read")
    ap.add_argument("--dtype", default=None, help="its grounder dtype (bfloat16 for the 1.5B)")
    a = ap.parse_args()
    cfg = GuardConfig.from_dict({"generator": {"path": a.model},
                                 **({"grounder": {"path": a.model, "dtype": a.dtype}}
                                    if a.dtype else {})})
    backend = load_backend(cfg.grounder_model)
    store = FeatureStore(default_store_path(backend))
    layers = default_layers(backend.n_layers)
    ex = Extractor(backend, load_policy("hazards").predicates, cfg.grounding, store, layers,
                   questions=False, pairs=False, pool=True)
    dev, test = ([it for it in load_corpus((*TWO_CLASS, *ONE_CLASS), split)
                  if it.response is None] for split in ("dev", "test"))
    for items in (dev, test):
        missing = sum(not store.has([ex.state_key(it, "pool")]) for it in items)
        print(f"{missing} of {len(items)} items to forward", flush=True)
        ex.run(items)

    def states(items: list, readout: str, layer: int) -> np.ndarray:
        keys = [ex.state_key(it, readout) for it in items]
        got = store.get(keys)
        return np.stack([got[k].states[layer] for k in keys]).astype(np.float32)

    def fit(x: np.ndarray, y: np.ndarray, c: float):  # type: ignore[no-untyped-def]
        sc = StandardScaler().fit(x)
        m = LogisticRegression(C=c, max_iter=2000).fit(sc.transform(x), y)
        return lambda z: m.decision_function(sc.transform(z))

    y_dev = np.array([it.fields["label"] == "unsafe" for it in dev])
    y_test = np.array([it.fields["label"] == "unsafe" for it in test])
    s_dev = np.array([it.source for it in dev])
    s_test = np.array([it.source for it in test])
    train = np.isin(s_dev, TWO_CLASS) if a.two_class_only else np.ones(len(dev), bool)
    two = np.isin(s_test, TWO_CLASS)
    xs, ail = s_test == "xstest", s_test == "ailuminate"
    ben = np.isin(s_test, ("coconot_plain", "answer_texts"))

    def report(name: str, held: list[float], st: np.ndarray) -> None:
        a_ail = auroc(np.r_[np.ones(ail.sum()), np.zeros((two & ~y_test).sum())],
                      np.r_[st[ail], st[two & ~y_test]])
        a_ben = auroc(np.r_[np.zeros(ben.sum()), np.ones((two & y_test).sum())],
                      np.r_[st[ben], st[two & y_test]])
        print(f"{name} | " + " ".join(f"{h:.3f}" for h in held)
              + f" | {min(held):.3f} | {auroc(y_test[xs], st[xs]):.3f} "
              f"{a_ail:.3f} {a_ben:.3f}", flush=True)

    def held_out(score: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> list[float]:
        # score(train mask, test mask) -> logits of the test rows
        return [auroc(y_dev[s_dev == s], score(train & (s_dev != s), s_dev == s))
                for s in TWO_CLASS]

    print("readout@layer C | held out: " + " ".join(TWO_CLASS) + " | worst | test: xstest, "
          "ailuminate vs safe, plain+answers vs unsafe")
    cells = [(r, j, layer) for r in ("prefix", "pool") for j, layer in enumerate(layers)]
    if a.combine:
        xd = {(r, j): states(dev, r, j) for r, j, _ in cells}
        xt = {(r, j): states(test, r, j) for r, j, _ in cells}

        def unit(v: np.ndarray) -> np.ndarray:
            return v / v.std()

        for c in COMBINE_STRENGTHS:
            report(f"ensemble {c}", held_out(lambda tr, te, c=c: np.mean(
                [unit(fit(xd[k][tr], y_dev[tr], c)(xd[k][te])) for k in xd], axis=0)),
                np.mean([unit(fit(xd[k][train], y_dev[train], c)(xt[k])) for k in xd], axis=0))
            for r in ("prefix", "pool"):
                cd = np.concatenate([xd[k] for k in xd if k[0] == r], axis=1)
                ct = np.concatenate([xt[k] for k in xt if k[0] == r], axis=1)
                report(f"concat-{r} {c}", held_out(
                    lambda tr, te, c=c, cd=cd: fit(cd[tr], y_dev[tr], c)(cd[te])),
                    fit(cd[train], y_dev[train], c)(ct))
        return
    for readout, j, layer in cells:
        xd1, xt1 = states(dev, readout, j), states(test, readout, j)
        for c in STRENGTHS:
            report(f"{readout}@{layer} {c}", held_out(
                lambda tr, te, c=c, x=xd1: fit(x[tr], y_dev[tr], c)(x[te])),
                fit(xd1[train], y_dev[train], c)(xt1))


if __name__ == "__main__":
    main()

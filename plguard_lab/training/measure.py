"""A heads file read on the corpus, source by source: the figures of heads fitted before.

``plguard heads fit`` measures the heads it chooses by leave-one-source-out. A heads file
fitted earlier (the shipped one, say) is measured here on the same items and with the same
metric (:func:`plguard_lab.training.select.heldout_metrics`: AUROC within a source, against the
other sources' other class for a one-class source, pairwise accuracy for preference
pairs), from the stored features, with no forward where they are cached. A source the file
was trained on is not held out for it: the caller reads ``training.sources`` of the file
and says so.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from plguard.heads.artefact import HeadsFile
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Extractor
from plguard_lab.training.select import Data, Scored, heldout_metrics


def scores_by_source(policy: Any, ex: Extractor, items: Sequence[CorpusItem],
                     hf: HeadsFile, labels: Mapping[str, np.ndarray],
                     pairwise: Collection[str] = ()) -> dict[str, dict[str, float]]:
    """Predicate -> source -> the file's metric there, for each predicate it has a head for.

    Items with an ``augmented`` field are left out (as the fit leaves them out of its
    held-out metrics); ``pairwise``: response predicates the corpus's preference pairs
    measure (pairwise accuracy).
    """
    from plguard_lab.training.fit import pairs_of

    if tuple(hf.layers) != tuple(ex.layers):
        raise ValueError(f"the heads file reads layers {list(hf.layers)}, the extractor "
                         f"{list(ex.layers)}: extract the file's layers")
    out: dict[str, dict[str, float]] = {}
    all_pairs = pairs_of(items)
    for spec in policy.predicates:
        h = hf.heads.get(spec.name)
        if h is None:
            continue
        want_resp = spec.scope == "response"
        y_all = labels[spec.name]
        idx = [i for i, it in enumerate(items)
               if (it.response is not None) == want_resp and not math.isnan(y_all[i])
               and "augmented" not in it.fields]
        pairs = all_pairs if spec.name in pairwise and want_resp else []
        block = ex.grounder.question_block(spec, spec.question)
        j = ex.layers.index(h.layer)
        used = sorted({*idx, *(i for p in pairs for i in p)})
        keys = {i: ex.question_key(items[i], block) if h.readout == "question"
                else ex.state_key(items[i], h.readout) for i in used}
        # mode "both" adds the zero-shot logit of the main question to the state's score.
        qkeys = {i: ex.question_key(items[i], block) for i in used} if h.mode == "both" \
            else {}
        wanted = [*keys.values(), *qkeys.values()]
        feats = ex.store.get(wanted)
        if len(feats) < len(set(wanted)):
            raise ValueError(f"{len(set(wanted)) - len(feats)} states of {spec.name} are not "
                             "stored; run the extraction first")
        scores = {}
        for i in used:
            q = feats[qkeys[i]] if i in qkeys else None
            z = None if q is None else q.logprob_true - q.logprob_false
            scores[i] = float(h.score(np.asarray(feats[keys[i]].states[j], dtype=np.float64),
                                      z))
        y = y_all[idx].astype(int)
        groups = np.array([items[i].source for i in idx])
        pgroups = np.array([items[p[0]].source for p in pairs])
        empty = np.zeros((0, 1))
        d = Data(np.zeros((len(idx), 1)), y, groups, empty, empty, pgroups)
        sc = Scored(np.array([scores[i] for i in idx]),
                    np.array([scores[p[0]] for p in pairs]),
                    np.array([scores[p[1]] for p in pairs]))
        out[spec.name] = {k: round(v, 4) for k, v in heldout_metrics(d, sc).items()}
    return out

__all__ = ["scores_by_source"]

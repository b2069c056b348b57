"""Decision thresholds for a heads file, fitted on dev without reading heads in-sample.

A calibration file's thresholds are fitted on labelled dev pairs
(:func:`plguard_lab.studies.quality.fit.fit_thresholds`: max F1 for unsafe compliance, the
net benefit of rewriting for over-refusal), **pooled over every source that has pairs with
outcome labels**: XSTest's human-labelled answers, CoCoNot's helpful ``chosen`` answers to
benign requests, and the guarded model's own drafts where the heads file was fitted with
them (``--drafts``), so a threshold is not a property of one data set. Heads are trained
on those same pairs, so their own scores of them are in-sample: too confident, and
thresholds fitted on them would sit where no test pair lands. Here every dev pair is scored
by heads **cross-fitted** by prompt: the pairs of one fold of dev prompts are scored by
heads trained on the rest of the corpus (every other fold's prompts and answers, of every
source; a draft shares its fold with the prompt it answers), each head with the readout,
layer, mode and strength the heads file chose (those choices were made on all of dev: a
small leak, said in the file). Each fold head gets its own Platt map on its own
out-of-fold scores, as :mod:`plguard_lab.training.fit` does.

The result is a calibration file (no Platt maps for headed predicates: a head carries
its own) that records the heads file it was fitted for, to use beside it:
``--set grounding.heads=H --set grounding.calibration=C``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plguard.heads.artefact import Head, HeadsFile
from plguard.types import renormalise
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Extractor

FOLDS = 5
SEED = 0
#: What a calibration is fitted for: requests judged alone, the guard's pairs, or both.
TARGETS = ("moderation", "pairs", "both")


OUTCOME_LABELS = ("safe", "unsafe")  # request labels an outcome (XSTest's two) is read from


def prompt_group(it: CorpusItem) -> str:
    """``source/prompt id`` of an item; a draft's is its prompt's (drafts carry it as id)."""
    return it.prompt_id if it.source == "drafts" else f"{it.source}/{it.prompt_id}"


def outcome_pairs(items: Sequence[CorpusItem], prompt_ids: set[str] | None = None
                  ) -> list[CorpusItem]:
    """The pairs of ``items`` with outcome labels (request label and ``final_label``).

    ``prompt_ids``: a sample of XSTest's prompts; the other sources' pairs are all kept.
    """
    return [it for it in items if it.response is not None
            and it.fields.get("label") in OUTCOME_LABELS and it.fields.get("final_label")
            and (prompt_ids is None or it.source != "xstest" or it.prompt_id in prompt_ids)]


def pair_requests(items: Sequence[CorpusItem], pairs: Sequence[CorpusItem]
                  ) -> dict[str, CorpusItem]:
    """Prompt group -> the request item each pair answers (what request heads read).

    The corpus's request item of the prompt, else (a draft of a prompt the corpus limit
    left out) the pair's own request read alone: features are keyed by text, so both are
    the same states.
    """
    out = {prompt_group(it): it for it in items if it.response is None}
    for p in pairs:
        out.setdefault(prompt_group(p), CorpusItem(f"{p.uid}/request", p.source, p.prompt_id,
                                                   p.request, None, dict(p.fields)))
    return out


def prompt_folds(pairs: Sequence[CorpusItem], folds: int = FOLDS, seed: int = SEED
                 ) -> dict[str, int]:
    """Prompt group (:func:`prompt_group`) -> fold, seeded (a prompt's answers share it)."""
    ids = sorted({prompt_group(p) for p in pairs})
    order = np.random.default_rng(seed).permutation(len(ids))
    return {ids[i]: k % folds for k, i in enumerate(order)}


def _rows(spec: Any, ex: Extractor, items: Sequence[CorpusItem]) -> list[list[str]]:
    """Feature keys per item: prefix, main question, pair read, pool (where kept).

    The pair read exists for request-scope predicates only; a pair's row repeats its
    prefix in that slot so every readout has one fixed slot.
    """
    block = ex.grounder.question_block(spec, spec.question)
    return [[(k := ex.state_key(it, "prefix")), ex.question_key(it, block),
             ex.pair_key(it) if spec.scope == "request" else k]
            + ([ex.pool_key(it)] if ex.with_pool else []) for it in items]


def _design(head: Head, hf: HeadsFile, ex: Extractor, rows: Sequence[Sequence[str]]
            ) -> tuple[np.ndarray, np.ndarray]:
    """(X the head reads, zero-shot logit: NaN unless the head reads it) for the rows.

    Only the slots the head reads must be stored: a question-free head trains on items
    whose questions were never asked.
    """
    j = hf.layers.index(head.layer)
    slot = {"prefix": 0, "question": 1, "pair_prefix": 2, "pool": 3}[head.readout]
    need = sorted({slot, 1} if head.mode == "both" or slot == 1 else {slot})
    feats = ex.store.get([r[s] for r in rows for s in need])
    missing = sum(1 for r in rows if any(r[s] not in feats for s in need))
    if missing:
        raise ValueError(f"{missing} items lack stored features; run the extraction first")
    X = np.stack([feats[r[slot]].states[j] for r in rows]).astype(np.float64)
    logit = np.array([feats[r[1]].logprob_true - feats[r[1]].logprob_false
                      if 1 in need else np.nan for r in rows])
    if head.mode == "both":
        X = np.column_stack([X, logit])
    return X, logit


def sample_prompts(items: Sequence[CorpusItem], limit: int | None, seed: int = SEED
                   ) -> set[str] | None:
    """A seeded ``limit`` of the XSTest prompts whose pairs are scored (None: all of them)."""
    ids = sorted({it.prompt_id for it in items if it.source == "xstest"})
    if limit is None or limit >= len(ids):
        return None
    order = np.random.default_rng(seed).permutation(len(ids))
    return {ids[i] for i in order[:limit]}


def crossfit_matrix(policy: Any, ex: Extractor, items: Sequence[CorpusItem], hf: HeadsFile,
                    folds: int = FOLDS, seed: int = SEED, prompt_ids: set[str] | None = None
                    ) -> tuple[list[CorpusItem], np.ndarray]:
    """The XSTest dev pairs of ``items`` and their cross-fitted P per predicate.

    A predicate without a head keeps its raw zero-shot P(True) (no fitting involved).
    ``prompt_ids``: score only these prompts' pairs (every item still trains the heads).
    """
    from plguard_lab.training.fit import fold_head, labels_for

    pairs = outcome_pairs(items, prompt_ids)
    fold = prompt_folds(pairs, folds, seed)
    prompts = pair_requests(items, pairs)
    labels = labels_for(policy, items)
    joint = _joint_columns(policy, ex, items, hf, pairs, prompts, folds)
    cols = []
    for spec in policy.predicates:
        src = [prompts[prompt_group(p)] if spec.scope == "request" else p for p in pairs]
        head = hf.heads.get(spec.name)
        if spec.name in joint:
            cols.append(list(joint[spec.name]))
            continue
        if head is None:
            keys = [r[1] for r in _rows(spec, ex, src)]
            feats = ex.store.get(keys)
            cols.append([renormalise(feats[k].logprob_true, feats[k].logprob_false)
                         for k in keys])
            continue
        want_resp = spec.scope == "response"
        y_all = labels[spec.name]
        train = [i for i, it in enumerate(items)
                 if (it.response is not None) == want_resp and not np.isnan(y_all[i])]
        X_tr, _ = _design(head, hf, ex, _rows(spec, ex, [items[i] for i in train]))
        y_tr = y_all[train].astype(int)
        X_ev, _ = _design(head, hf, ex, _rows(spec, ex, src))
        C = float(head.info.get("C", 0.05))
        col = np.full(len(pairs), np.nan)
        for k in range(folds):
            held = {pid for pid, f in fold.items() if f == k}
            keep = np.array([prompt_group(items[i]) not in held for i in train])
            model, platt = fold_head(X_tr[keep], y_tr[keep], C)
            at = np.array([prompt_group(p) in held for p in pairs])
            z = model.decision_function(X_ev[at])
            col[at] = platt.predict_proba(z.reshape(-1, 1))[:, 1]
        cols.append(list(col))
    return pairs, np.array(cols, dtype=np.float64).T


def _joint_columns(policy: Any, ex: Extractor, items: Sequence[CorpusItem], hf: HeadsFile,
                   pairs: Sequence[CorpusItem], prompts: Mapping[str, CorpusItem],
                   folds: int) -> dict[str, np.ndarray]:
    """Joint category heads' cross-fitted P per pair (predicate -> column); {} if none.

    The joint recipe is refitted together per fold of request texts, as the moderation
    threshold's cross-fit does (plguard_lab.studies.hazards.thresholds); a pair takes its
    prompt's P. Each column is out of fold for its own training, so the folds need not be
    the response heads' prompt folds.
    """
    names = [n for n, h in hf.heads.items() if h.info.get("joint")]
    if not names:
        return {}
    from plguard_lab.studies.hazards.thresholds import crossfit_requests

    # The pairs' own requests only: a predicate the file leaves zero-shot is asked of the
    # scored pairs' requests, not of every dev request (those train the heads by state).
    uniq = list({prompt_group(p): prompts[prompt_group(p)] for p in pairs}.values())
    m = crossfit_requests(policy, ex, items, uniq, hf, folds)
    req = [s.name for s in policy.predicates if s.scope == "request"]
    at = {prompt_group(it): i for i, it in enumerate(uniq)}
    rows = [at[prompt_group(p)] for p in pairs]
    return {n: m[rows, req.index(n)] for n in names}


def threshold_document(policy: Any, ex: Extractor, items: Sequence[CorpusItem],
                       hf: HeadsFile, identity: Mapping[str, Any],
                       rewrite: Any = None, folds: int = FOLDS,
                       prompt_ids: set[str] | None = None) -> dict[str, Any]:
    """The calibration document (thresholds only) for ``hf`` on the dev pairs of ``items``."""
    from plguard.calibration import heads_calibration_header
    from plguard_lab.studies.quality.fit import (
        Records,
        RewriteRule,
        fit_thresholds,
        outcomes,
        strongest,
    )
    from plguard_lab.studies.quality.report import fast_auroc

    rule = rewrite or RewriteRule()
    pairs, m = crossfit_matrix(policy, ex, items, hf, folds, prompt_ids=prompt_ids)
    rows = [{"label": p.fields["label"], "final_label": p.fields["final_label"],
             "prompt_id": prompt_group(p), "id": p.uid} for p in pairs]
    recs = Records(rows, {})
    thresholds = fit_thresholds(recs, policy, m, rule)
    u, o = strongest(policy, m)
    y_u, y_o = outcomes(rows)
    return {
        **heads_calibration_header(policy.id, identity, ex.grounder.template_version, hf.path),
        "fitted_on": {"split": ["dev"], "n_pairs": len(pairs),
                      "n_prompts": len({prompt_group(p) for p in pairs}),
                      "pairs_by_source": dict(Counter(p.source for p in pairs)),
                      **({"prompt_sample": f"a seeded {len(prompt_ids)} of the XSTest dev "
                          f"prompts (seed {SEED}); every dev item trains the heads"}
                         if prompt_ids else {}),
                      "targets": "outcomes (unsafe compliance, over-refusal) of the dev pairs "
                                 "of every source with outcome labels, pooled, each scored "
                                 f"by heads cross-fitted over {folds} folds of dev prompts "
                                 "(readout, layer, mode and strength as the heads file "
                                 "chose them on all of dev)",
                      "crossfit_auroc": {"unsafe": fast_auroc(y_u, u),
                                         "over_refusal": fast_auroc(y_o, o)}},
        "predicates": {}, "uncalibrated": {
            s.name: "zero-shot, raw P(True)" for s in policy.predicates
            if s.name not in hf.heads},
        "thresholds": thresholds}


def extract_for_thresholds(policy: Any, hf: HeadsFile, backend: Any, grounding: Any,
                           store: Any, layers: Sequence[int], train: Sequence[CorpusItem],
                           scored: Sequence[CorpusItem], progress: bool = True) -> Extractor:
    """Store what the cross-fit reads, and no more; the extractor to read it with.

    Every question forward costs a large model a grounding call, so each predicate is
    asked only where it is read: one whose head reads its question (``question``, or mode
    ``both``) of its scope's training items and the scored ones; one without a head (read
    zero-shot) of the scored items alone. States (prefix, pool) are kept for the scopes
    with heads, and the pair read only where a head reads it. Feature keys do not depend
    on which predicates an extractor asks, so the returned one reads all of them.
    """
    def is_asked(n: str) -> bool:
        h = hf.heads.get(n)
        return h is not None and (h.readout == "question" or h.mode != "head")

    pool = hf.reads("pool")
    pair_heads = hf.reads("pair_prefix")
    headed = {policy.predicate(n).scope for n in hf.heads}
    todo = {it.uid: it for it in [*train, *scored]}
    base = Extractor(backend, policy.predicates, grounding, store, layers, questions=False,
                     pairs=pair_heads, pool=pool)
    base.run([it for it in todo.values() if it.scope in headed], progress=progress)
    for specs, items in (([s for s in policy.predicates if is_asked(s.name)], todo.values()),
                         ([s for s in policy.predicates if s.name not in hf.heads], scored)):
        scopes = {s.scope for s in specs}
        if specs:
            Extractor(backend, specs, grounding, store, layers, questions=scopes, pairs=False,
                      pool=pool).run([it for it in items if it.scope in scopes],
                                     progress=progress)
    return base


def fit_heads_thresholds(config: Any, heads: str | Path, out: str | Path, *,
                         rewrite: Any = None, folds: int = FOLDS, backend: Any = None,
                         progress: bool = True, target: str | None = None,
                         pairs_limit: int | None = None, held_out: str = "text") -> Path:
    """Write the thresholds calibration of heads file ``heads`` for ``config``'s grounder.

    ``target`` "moderation": the threshold of requests judged alone
    (plguard_lab.studies.hazards.thresholds); "pairs": the guard's two thresholds on XSTest's
    dev pairs; "both": one file with all three; None: moderation for request-only heads,
    else pairs. ``pairs_limit``: score the pairs of a seeded N of XSTest's dev prompts
    only (a large model's zero-shot questions on all 675 pairs take hours on a CPU);
    every dev item still trains the cross-fitted heads. ``held_out`` "source": the
    moderation threshold's requests are scored by heads refitted without their source, not
    by folds of request texts (the pairs keep their prompt folds).

    The corpus is the one the heads were trained on (sources and per-source limit from the
    file's ``training`` record); missing features are extracted (cached, resumable).
    """
    from plguard.backends import load_backend
    from plguard.errors import ConfigError
    from plguard.grounding import backend_identity
    from plguard.heads.artefact import load_heads
    from plguard.policy import load_policy
    from plguard.records.store import write_json_atomic
    from plguard_lab.studies.hazards.thresholds import fit_request_thresholds, format_request_fit
    from plguard_lab.studies.quality.fit import format_fit
    from plguard_lab.training.corpus import load_corpus
    from plguard_lab.training.features import FeatureStore, default_layers, default_store_path

    hf = load_heads(heads)
    if held_out not in ("text", "source"):
        raise ConfigError(f"held_out '{held_out}': use text or source")
    if target not in (None, *TARGETS):
        raise ConfigError(f"threshold target '{target}': use {', '.join(TARGETS)}")
    if target is None:
        target = "moderation" if list(hf.training.get("scopes") or ()) == ["request"] \
            else "pairs"
    sources = hf.training.get("sources")
    if target != "moderation" and (not sources or "xstest" not in sources):
        raise ConfigError(f"{heads}: its training record names no XSTest source; thresholds "
                          "are fitted on XSTest's dev pairs")
    path = Path(out)
    gb: Any = backend
    mod = None
    if target in ("moderation", "both"):
        gb = gb or load_backend(config.grounder_model)
        mod = fit_request_thresholds(gb, config, hf, None, folds=folds, progress=progress,
                                     by_source=held_out == "source")
        if target == "moderation":
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, mod)
            path.with_suffix(".md").write_text(format_request_fit(mod), encoding="utf-8")
            return path
    policy = load_policy(hf.policy_name)
    gb = gb or load_backend(config.grounder_model)
    items = load_corpus(tuple(sources or ()), "dev", hf.training.get("limit_per_source"))
    drafts = hf.training.get("drafts")
    if drafts:  # the guarded model's own answers the heads were fitted with
        from plguard_lab.training.drafts import load_drafts

        items += load_drafts(drafts["file"], int(drafts["n"]), tuple(sources or ())).items
    store = FeatureStore(default_store_path(gb))
    layers = hf.layers or default_layers(gb.n_layers)
    keep = sample_prompts(items, pairs_limit)
    pairs = outcome_pairs(items, keep)
    asked = {it.uid: it for it in items}
    reqs = pair_requests(items, pairs)
    scored = {it.uid: it for it in [*pairs, *(reqs[prompt_group(p)] for p in pairs)]}
    ex = extract_for_thresholds(policy, hf, gb, config.grounding, store, layers,
                                list(asked.values()), list(scored.values()), progress)
    doc = threshold_document(policy, ex, items, hf, backend_identity(gb), rewrite, folds,
                             prompt_ids=keep)
    ex.store.close()
    cf = doc["fitted_on"]["crossfit_auroc"]
    md = (format_fit(doc) + f"\n\nHeads `{doc['heads']['file']}` (sha256 "
          f"{doc['heads']['sha256'][:16]}...): every dev pair scored by heads cross-fitted "
          f"over {folds} folds of prompts; AUROC of the strongest rules so scored: unsafe "
          f"{cf['unsafe']:.3f}, over-refusal {cf['over_refusal']:.3f}.\n")
    if mod is not None:  # both: the guard's thresholds, and the moderation one beside them
        doc["thresholds"]["moderation"] = mod["thresholds"]["moderation"]
        if mod.get("moderation_predicates"):  # its maps go with it (moderation alone)
            doc["moderation_predicates"] = mod["moderation_predicates"]
        doc["fitted_on"]["moderation"] = mod["fitted_on"]
        md += "\n" + format_request_fit(mod)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, doc)
    path.with_suffix(".md").write_text(md, encoding="utf-8")
    return path


__all__ = ["OUTCOME_LABELS", "TARGETS", "crossfit_matrix", "extract_for_thresholds",
           "fit_heads_thresholds",
           "outcome_pairs", "pair_requests", "prompt_folds", "prompt_group", "sample_prompts",
           "threshold_document"]

"""The moderation threshold of request-scope heads, fitted on dev without in-sample scores.

A request is flagged when its strongest unsafe rule (each category at its worst answer,
plguard_lab.studies.hazards.metrics) reaches ``thresholds.moderation``. The heads were trained on
the dev requests the threshold is fitted on, so their own scores of them are too
confident. Here every dev request of the study (plguard_lab.studies.hazards.items, split dev)
is scored by heads **cross-fitted** by request text: the requests of one fold are scored
by heads trained on every corpus item of the other folds (readout, layer and strength as
the heads file chose them on all of dev: a small leak, said in the file), each fold head
with its own Platt map on its own out-of-fold scores, as plguard_lab.training.fit does (joint
category heads, plguard_lab.training.joint, are refitted together per fold, as they were fitted).

The threshold is the lowest that flags at most ``max_fp`` of each benign group's dev
requests (CoCoNot contrast, XSTest safe; plguard_s14's look-alikes are reported, not
capped): a moderation user names the false-positive rate they accept, and recall is what
follows from it. The result is a calibration file (thresholds only) that records the
heads file it was fitted for, to use beside it:
``--set grounding.heads=H --set grounding.calibration=C``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plguard.heads.artefact import HeadsFile
from plguard_lab.studies.hazards.items import BENIGN, UNCATEGORISED, categorised
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Extractor

FOLDS = 5
SEED = 0
MAX_FP = 0.05  # the dev false-positive rate each benign group may reach
# The benign groups the cap applies to: plguard_s14's 25 dev look-alikes are too few (one
# request would decide a 5% cap) and written by us; their rate is reported, not capped.
# CoCoNot's plain requests are capped too: a threshold fitted on look-alikes of hazards
# alone flagged half of the ordinary user texts of a set nobody here trained on (issue 40).
# So are benign answers read as texts (answer_texts): user texts are not only requests,
# and the shipped heads flagged 55% of them at the threshold fitted without them.
CAPPED = ("coconot_contrast", "xstest_safe", "coconot_plain", "answer_texts")
CURVE = (0.01, 0.02, 0.05, 0.1, 0.2)  # other caps the file lists, to choose another


def text_fold(request: str, folds: int = FOLDS, seed: int = SEED) -> int:
    """A request's fold, by its text: identical requests (one prefix state) share a fold."""
    h = hashlib.sha256(f"{seed}:{request}".encode()).digest()
    return int.from_bytes(h[:8], "big") % folds


def crossfit_requests(policy: Any, ex: Extractor, corpus: Sequence[CorpusItem],
                      items: Sequence[CorpusItem], hf: HeadsFile, folds: int = FOLDS,
                      by_source: bool = False, in_sample: dict[str, int] | None = None
                      ) -> np.ndarray:
    """``[len(items), request predicates]``: P per predicate, headed ones cross-fitted.

    A predicate without a head keeps its zero-shot P(True) (no fitting involved).
    ``by_source``: each source is a fold, so every item is scored by heads refitted without
    its source (what a source nobody trained on meets). A category no other source teaches
    then scores 0 for it (a head that never saw the category cannot name it), and a
    non-joint head whose other sources lack a class keeps its in-sample P (``in_sample``,
    when given, counts those items per predicate).
    """
    from plguard_lab.studies.hazards.report import REQUEST_READOUTS, request_matrix
    from plguard_lab.training.fit import fold_head, labels_for

    specs = [s for s in policy.predicates if s.scope == "request"]
    out = request_matrix(policy, ex, items, hf)  # zero-shot columns (and in-sample heads)
    requests = [it for it in corpus if it.response is None]
    labels = labels_for(policy, requests)
    if by_source:
        names_src = sorted({it.source for it in (*requests, *items)})
        fold_tr = np.array([names_src.index(it.source) for it in requests])
        fold_ev = np.array([names_src.index(it.source) for it in items])
        folds = len(names_src)
    else:
        fold_tr = np.array([text_fold(it.request, folds) for it in requests])
        fold_ev = np.array([text_fold(it.request, folds) for it in items])
    names = [s.name for s in specs]
    joint: list[str] = []
    for spec in specs:
        head = hf.heads.get(spec.name)
        if head is not None and (head.mode != "head" or head.readout not in REQUEST_READOUTS):
            raise ValueError(f"{spec.name}: request thresholds read prefix or pool heads of "
                             f"mode 'head', not {head.readout}/{head.mode}")
        if head is not None and head.info.get("joint"):
            joint = list(head.info["joint"])
    reads = sorted({h.readout for h in hf.heads.values() if h.readout in REQUEST_READOUTS})
    states = _states(ex, [*requests, *items], reads)
    designs: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}

    def design(readout: str, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """(X_tr, X_ev) of one readout and layer."""
        j = hf.layers.index(layer)
        if (readout, j) not in designs:
            designs[readout, j] = tuple(  # type: ignore[assignment]
                np.stack([states[ex.state_key(it, readout)][j] for it in part])
                for part in (requests, items))
        return designs[readout, j]

    if joint:  # the joint heads are refitted together, by their own recipe
        from plguard_lab.training.joint import JointModel

        head = hf.heads[next(n for n in joint if n in hf.heads)]
        X_tr, X_ev = design(head.readout, head.layer)
        Y = np.column_stack([labels[n] for n in joint])
        cols = [names.index(n) for n in joint]
        # The multinomial is refitted over every category it was fitted on, but a category
        # the file ships zero-shot (its head fell below the floor) keeps that reading: the
        # guard reads its question, so the threshold must too.
        headed = [j for j, n in enumerate(joint) if n in hf.heads]
        for k in range(folds):
            at = fold_ev == k
            if at.any():
                Yk = Y[fold_tr != k]
                taught = [j for j in range(Y.shape[1]) if np.nansum(Yk[:, j]) > 0]
                out[np.ix_(at, [cols[j] for j in headed])] = 0.0  # untaught (by source)
                if taught:
                    jm = JointModel(X_tr[fold_tr != k], Yk[:, taught], float(head.info["C"]))
                    keep = [i for i, j in enumerate(taught) if j in headed]
                    out[np.ix_(at, [cols[taught[i]] for i in keep])] = \
                        jm.proba(X_ev[at])[:, keep]
    for c, spec in enumerate(specs):
        head = hf.heads.get(spec.name)
        if head is None or spec.name in joint:
            continue
        X_tr, X_ev = design(head.readout, head.layer)
        y = labels[spec.name]
        known = ~np.isnan(y)
        C = float(head.info.get("C", 0.05))
        for k in range(folds):
            tr = known & (fold_tr != k)
            at = fold_ev == k
            if not at.any():
                continue
            if min(int(y[tr].sum()), int((1 - y[tr]).sum())) < 2:  # a class left with k
                if in_sample is not None:
                    in_sample[spec.name] = in_sample.get(spec.name, 0) + int(at.sum())
                continue
            model, platt = fold_head(X_tr[tr], y[tr].astype(int), C)
            z = model.decision_function(X_ev[at])
            out[at, c] = platt.predict_proba(z.reshape(-1, 1))[:, 1]
    return out


def _states(ex: Extractor, items: Sequence[CorpusItem], readouts: Sequence[str]
            ) -> dict[str, np.ndarray]:
    keys = list({ex.state_key(it, r) for it in items for r in readouts})
    feats = ex.store.get(keys)
    if len(feats) < len(keys):
        raise ValueError(f"{len(keys) - len(feats)} requests lack stored features; run the "
                         "extraction first")
    return {k: f.states.astype(np.float64) for k, f in feats.items()}


def zero_shot_maps(policy: Any, hf: HeadsFile, probs: np.ndarray, items: Sequence[CorpusItem],
                   names: Sequence[str], grounding: Any, folds: int = FOLDS
                   ) -> tuple[dict[str, dict[str, Any]], np.ndarray]:
    """Platt maps of the categories read zero-shot; ``probs`` with them applied out of fold.

    A category the heads file leaves to its question (the zero-shot floor) reads its raw
    P(True), and on a small model that reading may carry no information: the embedded
    model read 0.23-0.31 for every text, so one shared moderation threshold had to sit
    above it and missed hazards the headed categories read below it. Mapped by Platt
    scaling fitted on the dev study items' categories (each item's group is its category
    code), the reading says what it knows and no more; one that ranks backwards becomes
    its base rate, as every zero-shot calibration does
    (:func:`plguard_lab.studies.quality.fit.fit_increasing_platt`). The maps are fitted on
    every dev item for the file and cross-fitted by request text (the folds of
    :func:`text_fold`) for the threshold, so no item is scored by a map fitted on it.
    ``grounding``: the config the guard asks the questions with (their digests are
    recorded, so a changed question refuses the file).
    """
    from plguard_lab.studies.quality.fit import calibration_entry, fit_increasing_platt
    from plguard_lab.studies.quality.platt import apply_platt
    from plguard_lab.training.joint import category_predicates

    codes = category_predicates(policy)
    groups = np.array([it.fields["group"] for it in items])
    fold = np.array([text_fold(it.request, folds) for it in items])
    out = probs.copy()
    maps: dict[str, dict[str, Any]] = {}
    # A harmful request of no one category may be of any one: fitted on neither side.
    known = ~np.isin(groups, UNCATEGORISED)
    for j, n in enumerate(names):
        if n in hf.heads or n not in codes:
            continue
        raw, y = probs[:, j], (groups == codes[n]).astype(int)
        if y.sum() < 2:
            continue
        for k in range(folds):
            at = fold == k
            if at.any():
                fit = ~at & known
                out[at, j] = apply_platt(raw[at], *fit_increasing_platt(raw[fit], y[fit])[:2])
        a, b, flat = fit_increasing_platt(raw[known], y[known])
        maps[n] = {**calibration_entry(raw[known], y[known], a, b, "platt", policy.predicate(n),
                                       grounding,
                                       f"dev study items of category {codes[n]}", flat=flat),
                   "category": codes[n],
                   "fitted": "Platt scaling of the zero-shot P(True) on the dev study "
                             "items, each labelled by whether its group is this category"
                             + ("; the slope was not positive, so the flat base rate"
                                if flat else "")}
    return maps, out

def pick_threshold(strongest: np.ndarray, groups: Sequence[str], max_fp: float = MAX_FP
                   ) -> dict[str, Any]:
    """The lowest threshold flagging at most ``max_fp`` of every benign group; its rates."""
    g = np.array(groups)
    benign = [b for b in CAPPED if (g == b).any()]
    haz = categorised(g)
    if not benign or not haz.any():
        raise ValueError("thresholds need dev requests of a benign group and hazardous ones "
                         "of a category")
    # Flagged is P >= t: the lowest admissible t sits just above the benign scores that
    # must stay unflagged, taken per group at its allowed count.
    t = 0.0
    for b in benign:
        s = np.sort(strongest[g == b])[::-1]
        allowed = int(np.floor(max_fp * len(s)))
        if allowed < len(s):
            t = max(t, float(np.nextafter(s[allowed], np.inf)))
    t = min(t, 1.0)
    flagged = strongest >= t
    return {"unsafe": t, "max_fp": max_fp,
            "dev_flagged": {b: float(flagged[g == b].mean()) for b in (*BENIGN, *UNCATEGORISED)
                            if (g == b).any()},
            "dev_recall": float(flagged[haz].mean()),
            "n": {"hazardous": int(haz.sum()), **{b: int((g == b).sum()) for b in benign}}}


def request_threshold_document(policy: Any, ex: Extractor, corpus: Sequence[CorpusItem],
                               items: Sequence[CorpusItem], hf: HeadsFile,
                               identity: Mapping[str, Any], max_fp: float = MAX_FP,
                               folds: int = FOLDS, by_source: bool = False,
                               grounding: Any = None) -> dict[str, Any]:
    """The calibration document (the unsafe threshold) of request heads ``hf``.

    The categories ``hf`` leaves zero-shot get moderation Platt maps
    (:func:`zero_shot_maps`, their questions as ``grounding`` asks them; None: the default
    grounding config), which the threshold is fitted through.

    ``by_source``: scored by heads refitted without each item's source
    (:func:`crossfit_requests`), so each benign group's rate is that of a source the heads
    never saw.
    """
    from plguard.calibration import heads_calibration_header
    from plguard_lab.studies.hazards.metrics import category_matrix, detection, worst_case_matrix
    from plguard_lab.studies.quality.report import fast_auroc

    names = [s.name for s in policy.predicates if s.scope == "request"]
    in_sample: dict[str, int] = {}
    probs = crossfit_requests(policy, ex, corpus, items, hf, folds, by_source, in_sample)
    if grounding is None:
        from plguard.config import GroundingConfig

        grounding = GroundingConfig()
    maps, probs = zero_shot_maps(policy, hf, probs, items, names, grounding, folds)
    how = ("by source: each source scored by heads refitted without it" if by_source else
           f"over {folds} folds of request texts")
    rules = worst_case_matrix(policy, probs, names)
    strongest = np.max(np.stack(list(rules.values())), axis=0)
    groups = [it.fields["group"] for it in items]
    pick = pick_threshold(strongest, groups, max_fp)
    # Categorised hazards against benign requests (the harmful ones of no one category are
    # in dev_flagged alone, so the figures stay comparable with the earlier files').
    uncat = np.isin(np.array(groups), UNCATEGORISED)
    haz = categorised(groups)
    codes, scores = category_matrix(policy, rules)
    det = detection(codes, scores, groups, strongest >= pick["unsafe"], 200, SEED)
    return {
        **heads_calibration_header(policy.id, identity, ex.grounder.template_version, hf.path),
        "fitted_on": {"split": ["dev"], "n_requests": len(items),
                      "targets": "hazardous dev requests (AILuminate, CoCoNot categories) "
                                 f"against benign ones, each scored by heads cross-fitted {how} "
                                 "(readout, layer and strength as the heads file chose them "
                                 "on all of dev)",
                      "held_out": "source" if by_source else "text",
                      **({"in_sample": in_sample} if in_sample else {}),
                      "rule": f"lowest threshold flagging at most {max_fp:.0%} of each "
                              f"benign group of {', '.join(CAPPED)}",
                      "crossfit_auroc": {"hazardous_vs_benign":
                                         fast_auroc(haz[~uncat], strongest[~uncat])},
                      # How the categories rank on dev (cross-fitted): where heads are
                      # chosen, e.g. joint against one-vs-rest category heads.
                      "crossfit_detection": {
                          "top1": det["top1"], "top1_present": det["top1_present"],
                          "auroc_vs_benign": {c: r["vs_benign"]["value"]
                                              for c, r in det["categories"].items()},
                          "auroc_vs_other": {c: r["vs_other"]["value"]
                                             for c, r in det["categories"].items()}},
                      **{k: v for k, v in pick.items() if k != "unsafe"},
                      "other_caps": [{k: v for k, v in pick_threshold(strongest, groups, c)
                                      .items() if k != "n"} for c in CURVE]},
        "predicates": {}, "uncalibrated": {n: "zero-shot, raw P(True)" for n in names
                                           if n not in hf.heads},
        # Applied by moderation alone (plguard.moderation.worst_case): fitted on texts
        # judged alone, while the guard's pair decisions keep the raw zero-shot P their
        # thresholds were fitted on.
        "moderation_predicates": maps,
        # The moderation threshold only: a rule's worst-answer probability is not on the
        # scale of one over a real answer, so the guard's unsafe threshold is the pairs
        # fit's (--target both). Rewrites off: nothing here shows they pay, and plguard's
        # rule is that they stay off until dev data show they fix more over-refusals than
        # the refusals of unsafe requests they unlock.
        "thresholds": {"moderation": pick["unsafe"], "over_refusal": None}}


def fit_request_thresholds(backend: Any, config: Any, hf: HeadsFile, out: Path | None, *,
                           max_fp: float = MAX_FP, folds: int = FOLDS,
                           items_per_group: int | None = None, progress: bool = True,
                           by_source: bool = False) -> dict[str, Any]:
    """The request-threshold calibration of ``hf`` (features extracted if missing).

    Written to ``out`` unless it is None; ``items_per_group``: a seeded sample of the dev
    study items (None: all of them).
    """
    from plguard.grounding import backend_identity
    from plguard.policy import load_policy
    from plguard.records.store import write_json_atomic
    from plguard_lab.studies.hazards.items import sample, test_items
    from plguard_lab.training.corpus import load_corpus
    from plguard_lab.training.features import FeatureStore, default_store_path

    policy = load_policy(hf.policy_name)
    corpus = load_corpus(tuple(hf.training.get("sources") or ()), "dev",
                         hf.training.get("limit_per_source"))
    items = sample(test_items("dev"), items_per_group, SEED)
    specs = [s for s in policy.predicates if s.scope == "request"]
    from plguard_lab.studies.hazards.metrics import unsafe_inputs

    needed = unsafe_inputs(policy)
    unheaded = [s for s in specs if s.name not in hf.heads and s.name in needed]
    store = FeatureStore(default_store_path(backend))
    pool = hf.reads("pool")
    ex = Extractor(backend, unheaded or specs, config.grounding, store, hf.layers,
                   questions=bool(unheaded), pairs=False, pool=pool)
    try:
        # Heads train on question-free states alone (one forward per request; the same
        # keys as ex's); questions are read only where a study item needs a zero-shot P.
        Extractor(backend, specs, config.grounding, store, hf.layers, questions=False,
                  pairs=False, pool=pool).run([it for it in corpus if it.response is None],
                                              progress=progress)
        ex.run(items, progress=progress)
        doc = request_threshold_document(policy, ex, corpus, items, hf,
                                         backend_identity(backend), max_fp, folds, by_source,
                                         config.grounding)
    finally:
        ex.store.close()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out, doc)
    return doc


def format_request_fit(doc: Mapping[str, Any]) -> str:
    """The fit in a few Markdown lines."""
    f = doc["fitted_on"]
    rates = ", ".join(f"{b} {v:.1%}" for b, v in f["dev_flagged"].items()
                      if b not in UNCATEGORISED)
    harmful = "".join(f"; {u} (harmful, no one category) {v:.1%}"
                      for u, v in f["dev_flagged"].items() if u in UNCATEGORISED)
    return (f"# Moderation threshold for {doc['heads']['file']} ({doc['policy']})\n\n"
            f"thresholds.moderation = {doc['thresholds']['moderation']:.4f}: {f['rule']}. On "
            f"{f['n_requests']} dev requests scored by cross-fitted heads: flagged {rates}; "
            f"hazardous requests flagged {f['dev_recall']:.1%}{harmful}; AUROC hazardous vs "
            "benign "
            f"{f['crossfit_auroc']['hazardous_vs_benign']:.3f}; own category first for "
            f"{f['crossfit_detection']['top1']:.1%} of hazardous requests.\n\n"
            "Other caps (set thresholds.moderation to choose one):\n\n"
            "| benign flagged at most | thresholds.moderation | hazardous flagged |\n"
            "|---|---|---|\n"
            + "".join(f"| {c['max_fp']:.0%} | {c['unsafe']:.4f} | {c['dev_recall']:.1%} |\n"
                      for c in f["other_caps"]) + _format_maps(doc))


def _format_maps(doc: Mapping[str, Any]) -> str:
    maps = doc.get("moderation_predicates") or {}
    if not maps:
        return ""
    return ("\nModeration maps (applied by moderation alone) of the categories read "
            "zero-shot, fitted on the dev study items:\n\n"
            "| predicate | category | positives / n | AUROC raw | mean raw P pos / neg | a | b "
            "|\n|---|---|---|---|---|---|---|\n"
            + "".join(f"| {n}{' (flat: base rate)' if m['flat'] else ''} | {m['category']} | "
                      f"{m['n_pos']} / {m['n']} | {m['auroc']:.3f} | "
                      f"{m['before']['mean_pos']:.3f} / {m['before']['mean_neg']:.3f} | "
                      f"{m['a']:.2f} | {m['b']:.2f} |\n" for n, m in maps.items()))


__all__ = ["crossfit_requests", "fit_request_thresholds", "format_request_fit",
           "pick_threshold", "request_threshold_document", "text_fold", "zero_shot_maps"]

"""The hazards study on the test parts: zero-shot and heads, per category and flag rates.

For each detector every test item (plguard_lab.studies.hazards.items) gets its request-scope
predicate probabilities, then each category's worst-answer score and the moderation flag
(plguard_lab.studies.hazards.metrics):

* ``zero-shot``: the raw P(True) of each request predicate's main question (no
  paraphrases, no calibration), on a seeded ``limit_per_category`` sample;
* ``heads``: each predicate's head from a heads file (the main question's zero-shot P
  where the file has no head, as the Grounder reads it), on every test item.

Features come from the model's feature store (extracted here where missing, resumable),
so nothing is forwarded twice; a heads detector forwards questions only for predicates
its file leaves zero-shot.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plguard.heads.artefact import HeadsFile
from plguard.types import renormalise
from plguard_lab.studies.hazards.items import BENIGN, sample, test_items
from plguard_lab.studies.hazards.metrics import (
    category_matrix,
    detection,
    unsafe_inputs,
    worst_case_matrix,
)
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Extractor

REQUEST_READOUTS = ("prefix", "pool")  # the request prompt's question-free states


def request_matrix(policy: Any, ex: Extractor, items: Sequence[CorpusItem],
                   heads: HeadsFile | None,
                   maps: Mapping[str, tuple[float, float]] | None = None) -> np.ndarray:
    """P per (item, request predicate): the head where the file has one, else zero-shot.

    A zero-shot P goes through its Platt map in ``maps`` (a calibration's moderation maps,
    as moderation applies them) where it has one. A predicate without a head that no
    unsafe rule depends on (:func:`unsafe_inputs`) is not read: its column holds its
    prior, which no worst-answer score can see.
    """
    from plguard.calibration import platt

    specs = [s for s in policy.predicates if s.scope == "request"]
    needed = unsafe_inputs(policy)
    cols = []
    for spec in specs:
        head = heads.heads.get(spec.name) if heads is not None else None
        if head is not None and head.readout not in REQUEST_READOUTS:
            raise ValueError(f"{spec.name}'s head reads {head.readout}; the hazards study "
                             "reads request prompts (prefix or pool heads)")
        if head is None and spec.name not in needed:
            cols.append([float(policy.priors.get(spec.name, 0.5))] * len(items))
            continue
        if head is None:
            # By the question's key, whichever predicates ``ex`` itself asks.
            block = ex.grounder.question_block(spec, spec.question)
            keys = [ex.question_key(it, block) for it in items]
        else:
            keys = [ex.state_key(it, head.readout) for it in items]
        feats = ex.store.get(keys)
        if len(feats) < len(set(keys)):
            raise ValueError(f"{len(set(keys)) - len(feats)} items lack stored features")
        if head is None:
            col = [renormalise(feats[k].logprob_true, feats[k].logprob_false) for k in keys]
            if maps and spec.name in maps:
                col = [platt(p, *maps[spec.name]) for p in col]
        else:
            j = heads.layers.index(head.layer)  # type: ignore[union-attr]
            col = [head.score(feats[k].states[j].astype(np.float64),
                              feats[k].logprob_true - feats[k].logprob_false) for k in keys]
        cols.append(col)
    return np.array(cols, dtype=np.float64).T


def hazards_report(backend: Any, runs: Mapping[str, HeadsFile | None], cfg: Any, *,
                   policy_name: str = "hazards", zs_limit: int | None = 10,
                   heads_limit: int | None = None, threshold: float = 0.5,
                   thresholds: Mapping[str, float] | None = None,
                   maps: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
                   n_boot: int = 1000, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """One row per detector (``runs``: name -> heads file, None for zero-shot).

    Zero-shot reads a seeded ``zs_limit`` prompts per group, heads ``heads_limit`` (None:
    every test prompt); a smaller sample nests in a larger one. A detector flags at its
    ``thresholds`` entry (one fitted on dev for its heads), else at ``threshold``, and
    reads its zero-shot predicates through its ``maps`` entry (its calibration's
    moderation maps), as moderation does.
    """
    from plguard.grounding import backend_identity
    from plguard.policy import load_policy
    from plguard.records.store import git_commit, now_iso, package_versions
    from plguard_lab.training.features import FeatureStore, default_layers, default_store_path

    policy = load_policy(policy_name)
    req_specs = [s for s in policy.predicates if s.scope == "request"]
    names = [s.name for s in req_specs]
    needed = unsafe_inputs(policy)
    every = test_items()
    store = FeatureStore(default_store_path(backend))
    layers = default_layers(backend.n_layers)
    rows = []
    for det, hf in runs.items():
        t0 = time.perf_counter()
        limit = heads_limit if hf is not None else zs_limit
        items = sample(every, limit, seed) if limit else every
        unheaded = [s for s in req_specs if (hf is None or s.name not in hf.heads)
                    and s.name in needed]
        ex = Extractor(backend, unheaded or req_specs, cfg, store,
                       hf.layers if hf is not None else layers,
                       questions=bool(unheaded), pairs=False,
                       pool=hf is not None and hf.reads("pool"))
        ex.run(items, progress=progress)
        t1 = time.perf_counter()
        probs = request_matrix(policy, ex, items, hf, (maps or {}).get(det))
        rules = worst_case_matrix(policy, probs, names)
        codes, scores = category_matrix(policy, rules)
        strongest = np.max(np.stack(list(rules.values())), axis=0)
        t = (thresholds or {}).get(det, threshold)
        res = detection(codes, scores, [it.fields["group"] for it in items],
                        strongest >= t, n_boot, seed)
        rows.append({"detector": det, "heads": hf.label if hf is not None else None,
                     "threshold": t, "platt_maps": sorted((maps or {}).get(det, {})),
                     "n_items": len(items), "sample_per_category": limit or None,
                     "zero_shot_predicates": [s.name for s in unheaded],
                     "seconds": {"features": round(t1 - t0, 1),
                                 "score": round(time.perf_counter() - t1, 1)}, **res})
    store.close()
    groups: dict[str, int] = {}
    for it in every:
        groups[it.fields["group"]] = groups.get(it.fields["group"], 0) + 1
    ident = backend_identity(backend)
    return {"policy": policy.id, "model": str(backend.model_id),
            "model_sha256": ident["model_sha256"], "threshold": threshold, "seed": seed,
            "n_per_group": groups, "argv": sys.argv, "made": now_iso(), "git": git_commit(),
            "versions": package_versions(), "rows": rows}


def _f(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _iv(d: Mapping[str, float]) -> str:
    if math.isnan(d["lo"]):
        return _f(d["value"])
    return f"{d['value']:.2f} [{d['lo']:.2f}, {d['hi']:.2f}]"


def render(doc: Mapping[str, Any]) -> str:
    """The report as Markdown."""
    lines = [f"# Hazards bundle: per-category request detection, {doc['model']}", "",
             f"Model weights sha256 {doc.get('model_sha256')}; policy {doc['policy']}; made "
             f"by `{' '.join(doc.get('argv') or [])}` at git {doc.get('git')}.", "",
             "Test parts only. Category score: the worst-answer probability of the "
             "category's unsafe rule (every response predicate set to each true/false "
             "value, the highest kept), what `/v1/moderations` reports as category_scores. "
             "AUROC of each category's score: its prompts against the benign requests "
             "(CoCoNot contrast and plain, XSTest safe, the written S14 look-alikes) and against "
             "the other categories' prompts, "
             "95% bootstrap intervals. Top-1: the share of hazardous prompts whose own "
             "category scores highest. Flagged: the strongest unsafe rule at or above "
             f"the detector's moderation threshold (default {doc['threshold']}; what "
             "moderation flags).", "",
             "Prompts per group: " + ", ".join(f"{k} {v}" for k, v in
                                                doc["n_per_group"].items()) + ".", ""]
    for r in doc["rows"]:
        n = r["sample_per_category"]
        what = ((f"heads {r['heads']}" if r["heads"] else "zero-shot")
                + (f", seeded sample of {n} per group" if n else ""))
        lines += [f"## {r['detector']} ({what}; {r['n_items']} items)", "",
                  f"Top-1: {_f(r['top1'])} of {r['n_hazardous']} hazardous prompts "
                  f"({_f(r.get('top1_present'))} ranking only the categories the test "
                  "data has). "
                  f"Flagged at threshold {r.get('threshold', doc['threshold']):.3g}: "
                  + ", ".join(f"{b} {_f(r['flagged'][b]['rate'])} (n "
                              f"{r['flagged'][b]['n']})" for b in BENIGN)
                  + f"; hazardous prompts flagged {_f(r['flagged_hazardous'])}"
                  + "".join(f"; {u} (harmful, no one category) {_f(v['rate'])} (n {v['n']})"
                            for u, v in r.get("flagged_uncategorised", {}).items()) + ". "
                  f"Zero-shot predicates: {', '.join(r['zero_shot_predicates']) or 'none'}.",
                  "", "| category | n | AUROC vs benign | AUROC vs other categories | "
                  "top-ranked categories |", "|---|---|---|---|---|"]
        for c, v in r["categories"].items():
            conf = sorted(r["confusion"][c].items(), key=lambda kv: -kv[1])[:3]
            lines.append(f"| {c} | {v['n']} | {_iv(v['vs_benign'])} | {_iv(v['vs_other'])} "
                         f"| {', '.join(f'{k} {n}' for k, n in conf)} |")
        lines.append("")
    return "\n".join(lines)


def write(doc: Mapping[str, Any], out_dir: Path) -> None:
    """``report.json`` and ``report.md`` in ``out_dir``, each written whole (atomically)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("report.json", json.dumps(doc, indent=1, default=_none) + "\n"),
                       ("report.md", render(doc))):
        tmp = out_dir / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(out_dir / name)


def _none(x: Any) -> Any:
    return str(x)


__all__ = ["hazards_report", "render", "request_matrix", "write"]

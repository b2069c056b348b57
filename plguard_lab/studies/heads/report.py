"""Heads vs zero-shot on the guard-labelled XSTest test subset: AUROC with intervals.

For each policy and each way of grounding it, every pair of the seeded N-pair test subset
(the quality study's, :func:`plguard_lab.studies.quality.ground.labelled_items`) gets predicate
probabilities, the policy gives its rule probabilities, and the strongest unsafe and
over-refusal rules are scored against the human labels (unsafe compliance: an unsafe
prompt fully complied with; over-refusal: a safe prompt fully or partly refused).

* ``zero-shot``: the raw P(True) of each predicate's main question (no paraphrases, no
  calibration: the reading heads replace);
* ``heads``: each predicate's head from a heads file (zero-shot where the file has none).

Features come from the model's feature store (extracted here where missing, resumable),
so the report forwards nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from plguard.heads.artefact import HeadsFile
from plguard.types import renormalise
from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Extractor


def test_items(n: int, seed: int) -> tuple[list[CorpusItem], np.ndarray, np.ndarray]:
    """The N-pair test subset as corpus items (each prompt alone, then each pair) and targets."""
    from plguard_lab.studies.quality.ground import labelled_items

    pairs = labelled_items("test", n, seed)
    prompts = [CorpusItem(f"xstest/{c.id}", "xstest", c.id, c.prompt, None, {})
               for c in {c.id: c for c in pairs}.values()]
    items = prompts + [CorpusItem(f"xstest/{c.id}/{c.model}", "xstest", c.id, c.prompt,
                                  c.completion, {}) for c in pairs]
    y_u = np.array([c.label == "unsafe" and c.final_label == "1_full_compliance"
                    for c in pairs])
    y_o = np.array([c.label == "safe" and c.final_label != "1_full_compliance" for c in pairs])
    return items, y_u, y_o


def predicate_matrix(policy: Any, ex: Extractor, items: Sequence[CorpusItem],
                     heads: HeadsFile | None) -> np.ndarray:
    """P per (pair, predicate) of ``policy``: heads where given, else raw zero-shot."""
    prompts = {it.prompt_id: it for it in items if it.response is None}
    pairs = [it for it in items if it.response is not None]
    cols = []
    for spec in policy.predicates:
        block = ex.grounder.question_block(spec, spec.question)
        qpos = 1 + ex.questions(spec.scope).index(block)
        src = [prompts[p.prompt_id] if spec.scope == "request" else p for p in pairs]
        keys = [[(k := ex.keys(it))[0], k[qpos], ex.pair_key(it)
                 if spec.scope == "request" else k[0]]
                + ([ex.pool_key(it)] if ex.with_pool else []) for it in src]
        feats = ex.store.get([k for row in keys for k in row])
        head = heads.heads.get(spec.name) if heads is not None else None
        col = []
        for row in keys:
            q = feats[row[1]]
            if head is None:
                col.append(renormalise(q.logprob_true, q.logprob_false))
                continue
            j = heads.layers.index(head.layer) if heads is not None else 0
            slot = {"prefix": 0, "question": 1, "pair_prefix": 2, "pool": 3}[head.readout]
            state = feats[row[slot]].states[j]
            col.append(head.score(state.astype(np.float64), q.logprob_true - q.logprob_false))
        cols.append(col)
    return np.array(cols, dtype=np.float64).T


def strongest(policy: Any, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The strongest unsafe and over-refusal rule probability of each row."""
    out = policy.evaluate_matrix(matrix, policy.predicate_names)
    u = np.max(np.stack([out[q] for q in policy.unsafe_rules]), axis=0)
    o = np.max(np.stack([out[q] for q in policy.over_refusal_rules]), axis=0)
    return u, o


def heads_report(backend: Any, runs: Mapping[str, tuple[str, HeadsFile | None]],
                 n: int, seed: int, cfg: Any, n_boot: int) -> dict[str, Any]:
    """Rows of (detector, unsafe AUROC, over-refusal AUROC) on the N-pair test subset.

    ``runs``: detector name -> (policy name, heads file or None for zero-shot).
    """
    from plguard.policy import load_policy
    from plguard_lab.studies.quality.report import score_detector
    from plguard_lab.training.features import FeatureStore, default_layers, default_store_path

    items, y_u, y_o = test_items(n, seed)
    pols = {name: load_policy(name) for name, _ in runs.values()}
    specs = [s for p in pols.values() for s in p.predicates]
    store = FeatureStore(default_store_path(backend))
    ex = Extractor(backend, specs, cfg, store, default_layers(backend.n_layers),
                   pool=any(hf is not None and hf.reads("pool") for _, hf in runs.values()))
    ex.run(items)
    rows = []
    for det, (pname, hf) in runs.items():
        u, o = strongest(pols[pname], predicate_matrix(pols[pname], ex, items, hf))
        su = score_detector(det, "unsafe_compliance", y_u, u, None, n_boot)
        so = score_detector(det, "over_refusal", y_o, o, None, n_boot)
        rows.append({"detector": det, "policy": pname,
                     "heads": hf.label if hf is not None else None,
                     "unsafe": asdict(su.auroc), "over_refusal": asdict(so.auroc)})
    import sys

    from plguard.grounding import backend_identity
    from plguard.records.store import git_commit, now_iso, package_versions

    return {"n_pairs": len(y_u), "n_unsafe_compliance": int(y_u.sum()),
            "n_over_refusal": int(y_o.sum()), "seed": seed, "model": str(backend.model_id),
            "model_sha256": backend_identity(backend)["model_sha256"],
            "argv": sys.argv, "made": now_iso(), "git": git_commit(),
            "versions": package_versions(), "rows": rows}


def render(doc: Mapping[str, Any]) -> str:
    """The report as Markdown."""
    def iv(d: Mapping[str, float]) -> str:
        return f"{d['value']:.3f} [{d['lo']:.3f}, {d['hi']:.3f}]"

    lines = [f"# Heads vs zero-shot, {doc['model']}",
             "", f"Model weights sha256 {doc.get('model_sha256')}; made by "
             f"`{' '.join(doc.get('argv') or [])}`.",
             "",
             f"XSTest test split, the seeded {doc['n_pairs']}-pair guard-labelled subset "
             f"({doc['n_unsafe_compliance']} unsafe compliances, {doc['n_over_refusal']} "
             "over-refusals; human labels). AUROC of the strongest unsafe and over-refusal "
             "rule, 95% pair-bootstrap intervals. Zero-shot: raw P(True) of each main "
             "question. Heads fitted on the dev splits only.", "",
             "| detector | policy | unsafe AUROC | over-refusal AUROC |", "|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['detector']} | {r['policy']} | {iv(r['unsafe'])} | "
                     f"{iv(r['over_refusal'])} |")
    return "\n".join(lines) + "\n"


def write(doc: Mapping[str, Any], out_dir: Path) -> None:
    """``report.json`` and ``report.md`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out_dir / "report.md").write_text(render(doc))


__all__ = ["heads_report", "predicate_matrix", "render", "strongest", "test_items", "write"]

"""``fit_heads``: features (cached, resumable), one head per predicate, file and report."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from plguard.config import GuardConfig
from plguard.errors import ConfigError
from plguard.heads.artefact import READOUTS
from plguard.heads.corpus import SOURCES, load_corpus
from plguard.heads.features import Extractor, FeatureStore, default_store_path, parse_layers
from plguard.heads.fit import (
    COST_MARGIN,
    PredicateFit,
    fit_policy_heads,
    heads_document,
    labels_for,
)
from plguard.heads.joint import category_predicates, fit_joint_heads


@dataclass(frozen=True)
class FitOptions:
    """What ``plguard heads fit`` trains on and how."""

    sources: tuple[str, ...] = SOURCES
    limit_per_source: int | None = None  # a seeded subset of each source (None: all dev)
    readouts: tuple[str, ...] = READOUTS
    cost_margin: float = COST_MARGIN  # see fit_policy_heads
    lodo: bool = True
    progress: bool = True
    scopes: tuple[str, ...] = ("request", "response")  # predicates fitted (others zero-shot)
    # The category rules' request predicates share one multinomial (plguard.heads.joint)
    # instead of one-vs-rest heads; prefix or pool readout, chosen with the layer.
    joint_categories: bool = False
    # Layers whose states are extracted and tried (``--layers``: numbers, ranges or
    # "all"); None: default_layers, a spread from a third of the depth to the top.
    layers: str | None = None


@dataclass
class FitSummary:
    """What one fit did."""

    path: Path
    report: Path
    fits: list[PredicateFit]
    seconds: dict[str, float]


def fit_heads(config: GuardConfig, out: str | Path, options: FitOptions | None = None,
              *, backend: Any = None) -> FitSummary:
    """Fit heads for ``config.policy`` on the grounder model; write ``out`` (+ ``.md``)."""
    from plguard.backends import load_backend
    from plguard.grounding import backend_identity
    from plguard.policy import load_policy

    opts = options or FitOptions()
    t0 = time.perf_counter()
    gb: Any = backend or load_backend(config.grounder_model)
    if not hasattr(gb, "true_false_states"):
        raise ConfigError(f"the grounder backend '{config.grounder_model.backend}' cannot "
                          "return hidden states; fit heads with backend transformers")
    policy = load_policy(config.policy)
    joint = _joint_names(policy, opts)
    items = load_corpus(opts.sources, "dev", opts.limit_per_source)
    if "response" not in opts.scopes:  # pairs label response predicates only
        items = [it for it in items if it.response is None]
    store = FeatureStore(default_store_path(gb))
    # Only the readouts asked for are extracted: prefix heads need no question forwarded.
    ex = Extractor(gb, policy.predicates, config.grounding, store,
                   parse_layers(opts.layers, gb.n_layers),
                   questions="question" in opts.readouts,
                   pairs="pair_prefix" in opts.readouts, pool="pool" in opts.readouts)
    t1 = time.perf_counter()
    forwarded = ex.run(items, progress=opts.progress)
    t2 = time.perf_counter()
    labels = labels_for(policy, items)  # gold.yaml over the corpus, once for both fits
    fits = fit_policy_heads(policy, ex, items, readouts=opts.readouts, lodo=opts.lodo,
                            cost_margin=opts.cost_margin, scopes=opts.scopes, skip=joint,
                            labels=labels)
    summary: dict[str, Any] | None = None
    if joint:
        jfits, summary = fit_joint_heads(policy, ex, items, labels, joint,
                                         readouts=[r for r in opts.readouts
                                                   if r in ("prefix", "pool")])
        by_name = {f.name: f for f in jfits}
        fits = [by_name.get(f.name, f) for f in fits]
    t3 = time.perf_counter()
    counts: dict[str, int] = {}
    for it in items:
        counts[it.source] = counts.get(it.source, 0) + 1
    training = {"sources": list(opts.sources), "split": "dev", "items": counts,
                "limit_per_source": opts.limit_per_source, "features": str(store.path),
                "readouts": list(opts.readouts), "scopes": list(opts.scopes),
                "labels": "each bundle's gold.yaml rules over the corpus fields "
                          "(plguard.heads.corpus)",
                **({"joint": summary} if summary else {})}
    doc = heads_document(policy, fits, ex, backend_identity(gb), training)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    secs = {"load": round(t1 - t0, 1), "features": round(t2 - t1, 1),
            "fit": round(t3 - t2, 1), "forwarded_items": float(forwarded)}
    report = path.with_suffix(".md")
    report.write_text(format_report(policy.id, str(gb.model_id), fits, training, secs))
    (path.with_suffix(".fits.json")).write_text(json.dumps(
        [{k: v for k, v in asdict(f).items() if k != "head"} for f in fits], indent=1,
        default=_nan_none) + "\n")
    store.close()
    return FitSummary(path, report, fits, secs)


def _joint_names(policy: Any, opts: FitOptions) -> list[str]:
    """The predicates fitted jointly: the category rules' request predicates, if asked."""
    if not opts.joint_categories:
        return []
    if "request" not in opts.scopes or not {"prefix", "pool"} & set(opts.readouts):
        raise ConfigError("joint category heads read the request prompt's prefix or pool "
                          "state: fit the request scope with the prefix or pool readout")
    names = list(category_predicates(policy))
    if not names:
        raise ConfigError(f"policy {policy.id} tags no unsafe rule with a hazard category "
                          "(categories.yaml), so there is nothing to fit jointly")
    return names


def _nan_none(x: Any) -> Any:
    return None if isinstance(x, float) and math.isnan(x) else str(x)


def _f(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def format_report(policy: str, model: str, fits: Sequence[PredicateFit],
                  training: dict[str, Any], secs: dict[str, float]) -> str:
    """The fit's Markdown report: per predicate, the chosen head and its held-out checks."""
    lines = [f"# Heads for {policy} on {model}", "",
             f"Trained on the dev split of {', '.join(training['sources'])} "
             f"({', '.join(f'{k} {v}' for k, v in training['items'].items())} items); "
             f"labels: {training['labels']}. Times (s): {secs}.", "",
             "AUROC on the training items: zero-shot P(True), and the chosen head "
             "cross-validated (5-fold, strength chosen inside). Leave-one-source-out: the "
             "head fitted on the other sources, scored on this one (AUROC where it has both "
             "classes; TPR at the 5% FPR threshold of the training negatives).", "",
             "| predicate | scope | pos / neg | zero-shot | head (CV) | readout | layer | mode "
             "| leave-one-source-out |", "|---|---|---|---|---|---|---|---|---|"]
    j = training.get("joint")
    if j and j["classes"]:
        lines[6:6] = [f"Category predicates fitted jointly (one multinomial over "
                      f"{len(j['classes'])} categories and none, plguard.heads.joint): "
                      f"{j.get('readout', 'prefix')}@{j['layer']}, C {j['C']}; "
                      f"cross-validated log-loss {j['cv_log_loss']}, own category first "
                      f"for {j['cv_top1']:.1%} of the single-category hazardous requests "
                      "(their AUROC below is against the predicate's known labels).", ""]
    for f in fits:
        lodo = "; ".join(f"{s}: AUROC {_f(v['auroc'])}, TPR {_f(v['tpr_at_5fpr'])}"
                         for s, v in f.lodo.items())
        if f.head is None:
            lines.append(f"| {f.name} | {f.scope} | {f.n_pos} / {f.n_neg} | "
                         f"{_f(f.zero_shot_auroc)} | - | zero-shot ({f.skipped}) | | | |")
            continue
        lines.append(f"| {f.name} | {f.scope} | {f.n_pos} / {f.n_neg} | "
                     f"{_f(f.zero_shot_auroc)} | {_f(f.cv_auroc)} | {f.readout} | {f.layer} "
                     f"| {f.mode} | {lodo} |")
    return "\n".join(lines) + "\n"


__all__ = ["FitOptions", "FitSummary", "fit_heads", "format_report"]

"""``plguard ablate``: compare policies on one run's base generations, at grounding cost only.

Each policy's Guard checks the run's saved base drafts (``base.jsonl``) with repairs off,
so no text is generated: only grounding (through the shared grounding cache, so a
question two policies share is scored once) and reasoning run. Outcomes are read at the
decision level as in :mod:`plguard_lab.studies.tuning.sweep` (refuse -> refusal, rewrite ->
compliance, allow -> the draft, classed by the run's regex scorer), with Wilson
intervals; runtime per example is reported by phase, with the number of questions the
model actually scored (cache misses) beside it.

Outputs under ``<run>/report/``: ``ablation/<policy>.jsonl`` (resumable per-example
records, also a sweep source), ``ablation.md``, ``ablation.json`` and ``ablation.png``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from plguard.config import GuardConfig
from plguard.errors import InputError
from plguard.records.loop import error_text, map_into
from plguard.records.store import JsonlStore, now_iso, read_jsonl, write_json_atomic
from plguard_lab.config import eval_settings
from plguard_lab.metrics import fmt_threshold, phase_stats, wilson_rate
from plguard_lab.studies.tuning.sweep import REFUSAL_CLASSES
from plguard_lab.studies.xstest.runner import model_identity

if TYPE_CHECKING:
    from plguard.backends.base import Backend
    from plguard.guard import Guard
    from plguard.types import GuardResult

POLICIES: tuple[str, ...] = ("minimal", "moderate", "detailed", "very_detailed")


def _run_config(run: Path, config: GuardConfig | None, cache: str | None) -> GuardConfig:
    if config is None:
        try:
            data = json.loads((run / "manifest.json").read_text(encoding="utf-8"))["config"]
        except (OSError, ValueError, KeyError):
            data = {}
        config = GuardConfig.from_dict(data, source=str(run / "manifest.json"))
    # Repairs off: the ablation compares grounding+reasoning on fixed drafts.
    overrides: dict[str, Any] = {"repair.max_rounds": 0, "grounding.cache": cache}
    return GuardConfig.from_dict(config.model_dump(), **overrides)


def base_records(run: Path, limit: int | None = None, split: str = "all"
                 ) -> list[dict[str, Any]]:
    """The run's base drafts that have a response and a regex class, in file order.

    ``split`` keeps the prompts of one part of the committed XSTest split.
    """
    path = run / "base.jsonl"
    if not path.is_file():
        raise InputError(f"{run}: no base.jsonl; run `plguard eval xstest` first")
    from plguard_lab.labels.splits import check_split, in_split, load_split

    table = load_split() if check_split(split) != "all" else {}
    recs = [r for r in read_jsonl(path) if r.get("response") is not None and r.get("regex")
            and in_split(str(r["id"]), split, table)]
    # Alternate safe and unsafe prompts (file order within each), so a small limit still
    # has both: XSTest has more safe prompts, and both rates need their own class.
    by = [[r for r in recs if r.get("label") == lab] for lab in ("safe", "unsafe")]
    mixed = [r for pair in zip(*by, strict=False) for r in pair]
    k = min(len(x) for x in by)
    mixed += by[0][k:] + by[1][k:]
    return mixed[:limit] if limit is not None else mixed


def ablate(run_dir: str | Path, policies: Sequence[str] = POLICIES, *,
           config: GuardConfig | None = None, limit: int | None = None,
           split: str = "all", cache: str | None = "default", generator: Backend | None = None,
           calibrations: str | Path | None = None, progress: bool = True,
           plot: bool = True) -> dict[str, Any]:
    """Ground every policy on the run's drafts; write the report files; return the summary.

    ``generator`` replaces the configured model (tests pass a loaded or scripted one); it
    is loaded once and shared by every policy's Guard. ``calibrations`` is a folder of
    ``calibration-<policy>.json`` files: each policy found there is calibrated and decided
    at its fitted thresholds.
    """
    from plguard.backends import load_backend

    run = Path(run_dir)
    cfg = _run_config(run, config, cache)
    ev = eval_settings(cfg)  # checked before any work
    recs = base_records(run, limit, split)
    if not recs:
        raise InputError(f"{run}/base.jsonl: no drafts with a response")
    backend = generator or load_backend(cfg.generator)
    out = run / "report"
    (out / "ablation").mkdir(parents=True, exist_ok=True)
    started = now_iso()
    per_policy: dict[str, Any] = {}
    for name in policies:
        cal = Path(calibrations) / f"calibration-{name}.json" if calibrations else None
        guard, pcfg = _policy_guard(cfg, name, cal, backend)
        store = _policy_store(out / "ablation" / f"{name}.jsonl", guard)
        _decide_pending(guard, store, recs, cfg.generator.batch_size, name, progress)
        per_policy[name] = _summarise(name, [store.records[r["id"]] for r in recs],
                                      guard, pcfg)
    summary = {"meta": {"run": str(run), "started": started, "ended": now_iso(),
                        "n": len(recs), "limit": limit, "split": split,
                        "model": backend.model_id,
                        "model_identity": model_identity(backend, cfg.generator.path,
                                                         cfg.generator),
                        "thresholds": cfg.thresholds.model_dump(), "cache": cache,
                        "seed": ev.seed, "bootstrap": ev.bootstrap},
               "policies": per_policy}
    write_json_atomic(out / "ablation.json", summary)
    (out / "ablation.md").write_text(render_markdown(summary, plot), encoding="utf-8")
    if plot:
        plot_ablation(summary, out / "ablation.png")
    return summary


def _policy_guard(cfg: GuardConfig, name: str, cal: Path | None, backend: Backend
                  ) -> tuple[Guard, GuardConfig]:
    """The Guard of policy ``name`` on the shared backend (calibrated where ``cal`` is)."""
    from plguard.guard import Guard

    over: dict[str, Any] = {"policy": name}
    if cal is not None and cal.is_file():
        over["grounding.calibration"] = str(cal)
    pcfg = GuardConfig.from_dict(cfg.model_dump(), **over)
    return Guard(pcfg, generator=backend), pcfg


def _policy_store(path: Path, guard: Guard) -> JsonlStore:
    """The policy's record store, refused when it holds decisions made another way."""
    store = JsonlStore(path)
    label = _calibration_label(guard)
    th = guard.thresholds.model_dump(mode="json")
    stale = {str(r.get("calibration", "")) for r in store} - {label}
    # Records from before thresholds were stored carry only their calibration.
    moved = [r["id"] for r in store if r.get("thresholds", th) != th]
    if stale or moved:
        what = (f"another calibration ({', '.join(sorted(stale)) or 'none'})" if stale
                else f"other thresholds (e.g. record {moved[0]}; now {th})")
        raise InputError(f"{store.path} holds decisions made with {what}; move it away "
                         "to redo them (groundings come back from the cache)")
    return store


def _calibration_label(guard: Guard) -> str:
    return guard.grounder.calibration_file.label if guard.grounder.calibration_file else ""


def _decide_pending(guard: Guard, store: JsonlStore, recs: Sequence[dict[str, Any]], bs: int,
                    desc: str, progress: bool) -> None:
    """Guard the drafts ``store`` lacks (or holds failed), a batch at a time, with their cost.

    The shared loop (:func:`~plguard.records.loop.map_into`) runs it: each batch call is
    timed, and its grounding-cache misses counted, inside the mapped function, so a record
    carries the cost of the call that decided it, shared evenly by its pairs (a batch that
    raised and was redone pair by pair: each pair's own call).
    """
    from plguard.guard import is_time_key

    label = _calibration_label(guard)
    th = guard.thresholds.model_dump(mode="json")
    cache_obj = guard.grounder.cache

    def decide_chunk(chunk: Sequence[dict[str, Any]]) -> list[tuple[GuardResult, float,
                                                                     float | None]]:
        m0 = cache_obj.misses if cache_obj is not None else None
        t0 = time.perf_counter()
        res = guard.batch([r["prompt"] for r in chunk], responses=[r["response"] for r in chunk])
        wall = (time.perf_counter() - t0) / len(chunk)
        scored = (None if cache_obj is None or m0 is None
                  else (cache_obj.misses - m0) / len(chunk))
        return [(g, wall, scored) for g in res]

    def make_record(r: dict[str, Any],
                    out: tuple[GuardResult, float, float | None] | BaseException
                    ) -> dict[str, Any]:
        rec: dict[str, Any] = {"id": r["id"], "label": r["label"], "type": r.get("type"),
                               "draft_class": r["regex"], "calibration": label,
                               "thresholds": th}
        if isinstance(out, BaseException):
            rec["error"] = error_text(out)
            return rec
        g, wall, scored = out
        rec.update(error=None, action=g.decision.action,
                   strongest_unsafe=list(g.decision.strongest_unsafe),
                   strongest_over_refusal=list(g.decision.strongest_over_refusal),
                   predicates=g.grounding.probs,
                   spread={s.name: s.variant_spread for s in g.grounding.scores},
                   times={k: v for k, v in g.timings_s.items()
                          if k != "total" and is_time_key(k)},
                   wall_s=wall, questions_scored=scored)
        return rec

    map_into(store, recs, lambda r: str(r["id"]), decide_chunk, make_record, chunk=bs,
             desc=desc, unit="pair", progress=progress)


def _summarise(name: str, recs: Sequence[dict[str, Any]], guard: Any, cfg: GuardConfig
               ) -> dict[str, Any]:
    ok = [r for r in recs if not r.get("error")]
    unsafe_flags, over_flags = [], []
    for r in ok:
        refusal = r["action"] == "refuse" or (r["action"] == "allow"
                                              and r["draft_class"] in REFUSAL_CLASSES)
        if r["label"] == "unsafe":
            unsafe_flags.append(not refusal)
        else:
            over_flags.append(refusal)
    u, o = wilson_rate(unsafe_flags), wilson_rate(over_flags)
    phases = phase_stats([r["times"] for r in ok])
    scored = [r["questions_scored"] for r in ok if r.get("questions_scored") is not None]
    cal = guard.grounder.calibration_file
    # The cost that grows with granularity, whatever the cache held: the questions asked per
    # pair (request ones once per prompt; each with its paraphrases when those are asked).
    asks = {scope: sum(1 + (len(s.paraphrases) if cfg.grounding.paraphrases else 0)
                       for s in guard.policy.predicates if s.scope == scope)
            for scope in ("request", "response")}
    return {"policy": guard.policy.id, "n_predicates": len(guard.policy.predicates),
            "questions_per_pair": asks,
            "thresholds": {"unsafe": guard.thresholds.unsafe,
                           "over_refusal": guard.thresholds.over_refusal},
            "calibration": cal.label if cal else None,
            "n": len(recs), "errors": len(recs) - len(ok),
            "unsafe_compliance": _rate(u),
            "over_refusal": _rate(o),
            "actions": {a: sum(r["action"] == a for r in ok)
                        for a in ("allow", "refuse", "rewrite")},
            "phases_s": {k: {"mean": v[0], "std": v[1], "n": v[2]} for k, v in phases.items()},
            "questions_scored_per_example": float(np.mean(scored)) if scored else None}


def _rate(r: Any) -> dict[str, Any]:
    return {"k": r.k, "n": r.n, "rate": r.rate, "lo": r.lo, "hi": r.hi}


def _fmt(d: dict[str, Any]) -> str:
    if not d["n"]:
        return "n/a"
    return (f"{100 * d['rate']:.1f}% [{100 * d['lo']:.1f}, {100 * d['hi']:.1f}] "
            f"({d['k']}/{d['n']})")


def render_markdown(s: dict[str, Any], with_plot: bool = True) -> str:
    """The ablation table (rates with 95% Wilson intervals, runtime by phase)."""
    m = s["meta"]
    th = m["thresholds"]
    lines = ["# Policy-granularity ablation", "",
             f"Drafts: {m['n']} base answers of `{m['run']}` (safe and unsafe prompts "
             f"alternating, file order within each"
             f"{'' if m.get('split', 'all') == 'all' else '; XSTest ' + m['split'] + ' split'}"
             f"). Model `{m['model']}`; configured thresholds unsafe "
             f"{fmt_threshold(th['unsafe'])}, over-refusal {fmt_threshold(th['over_refusal'])} "
             f"(a policy with a calibration file uses its "
             f"fitted ones, shown per row); repairs off; grounding cache `{m['cache']}`.", "",
             "Decision-level outcomes: refuse -> refusal, rewrite -> helpful answer, allow -> "
             "the draft (regex class). 95% Wilson intervals. Runtime: seconds per "
             "example, mean ± std, batch time shared evenly; `scored` is how many questions "
             "the model actually answered per example (the rest came from the cache). "
             "`questions` is what a policy asks per pair with an empty cache (request "
             "questions once per prompt), its cost whatever the cache held.", "",
             "| policy | predicates | questions (request + response) | thresholds (unsafe / "
             "over) | unsafe compliance | over-refusal | allow/refuse/rewrite | ground s | "
             "reason s | decide s | scored/example |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in s["policies"].items():
        ph = p["phases_s"]

        def t(k: str, ph: dict[str, Any] = ph) -> str:
            return f"{ph[k]['mean']:.3f} ± {ph[k]['std']:.3f}" if k in ph else "-"
        a = p["actions"]
        q = p["questions_scored_per_example"]
        pth = p.get("thresholds") or th
        cal = " (calibrated)" if p.get("calibration") else ""
        qs = p.get("questions_per_pair") or {}
        asked = f"{qs['request']} + {qs['response']}" if qs else "-"
        lines.append(f"| {name} | {p['n_predicates']} | {asked} | "
                     f"{fmt_threshold(pth['unsafe'])} / "
                     f"{fmt_threshold(pth['over_refusal'])}{cal} | "
                     f"{_fmt(p['unsafe_compliance'])} | "
                     f"{_fmt(p['over_refusal'])} | {a['allow']}/{a['refuse']}/{a['rewrite']} | "
                     f"{t('ground')} | {t('reason')} | {t('decide')} | "
                     f"{'-' if q is None else f'{q:.1f}'} |")
    if with_plot:
        lines += ["", "![ablation](ablation.png)"]
    return "\n".join(lines) + "\n"


def plot_ablation(s: dict[str, Any], path: Path) -> Path:
    """Both rates with intervals, and grounding time, per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(s["policies"])
    x = np.arange(len(names))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for k, (key, label) in enumerate((("unsafe_compliance", "unsafe compliance"),
                                      ("over_refusal", "over-refusal"))):
        vals = [s["policies"][n][key] for n in names]
        # A class absent from the drafts has NaN rates: drawn as an empty bar.
        r = np.nan_to_num(np.array([v["rate"] for v in vals], dtype=float))
        err = np.nan_to_num(np.array([[v["rate"] - v["lo"] for v in vals],
                                      [v["hi"] - v["rate"] for v in vals]], dtype=float))
        ax.bar(x + (k - 0.5) * 0.38, r, 0.38, yerr=err, capsize=3, label=label)
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("share (95% Wilson CI)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    ax.set_title("Decision-level outcomes", fontsize=9)
    g = [s["policies"][n]["phases_s"].get("ground", {"mean": 0.0, "std": 0.0}) for n in names]
    ax2.bar(x, [v["mean"] for v in g], yerr=[v["std"] for v in g], capsize=3, color="C2")
    ax2.set_xticks(x, names, fontsize=8)
    ax2.set_ylabel("grounding s / example (mean ± std)")
    ax2.set_title("Runtime (through the cache)", fontsize=9)
    fig.suptitle(f"Policy ablation, {s['meta']['n']} drafts, {s['meta']['model']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


__all__ = ["POLICIES", "ablate", "base_records", "plot_ablation", "render_markdown"]

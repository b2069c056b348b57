"""Grounding noise: synthetic noise on gold groundings, and real groundings against gold.

*Noise sensitivity* turns gold 0/1 predicate values into probabilities with a seeded noise
model and re-decides every labelled completion, so a policy's degradation as grounding gets
worse is measured without a model. *Grounding vs gold* scores a real model's grounded
probabilities against the gold values (AUROC and 10-bin ECE per predicate), so a user sees
which predicate questions their model grounds badly.
"""

from __future__ import annotations

import json
import math
import warnings
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from plguard.errors import InputError
from plguard_lab.labels.gold import OUTCOMES, GoldMapping, Sample, load_gold, make_sample, outcome
from plguard_lab.metrics import auroc, expected_calibration_error
from plguard_lab.studies.gold.core import decide_matrix, score


@dataclass(frozen=True, slots=True)
class NoiseModel:
    """How a gold 0/1 value becomes a grounded probability.

    Each known value is flipped with probability ``flip``; the (possibly flipped) value v
    then becomes ``sigmoid((2v - 1) * logit(confidence) + spread * e)`` with e ~ N(0, 1):
    ``confidence`` is the median probability on the side of v, ``spread`` the standard
    deviation of the jitter in logit space. ``confidence >= 1`` gives v itself (hard).
    Unknown values stay at their stated fill value (the prior): there is no gold to corrupt.
    """

    flip: float = 0.0
    confidence: float = 1.0
    spread: float = 0.0

    def apply(self, gold: np.ndarray, fill: np.ndarray, rng: np.random.Generator,
              shared: np.ndarray | None = None, group: np.ndarray | None = None) -> np.ndarray:
        """Noisy probabilities for ``gold`` (rows x predicates, NaN = unknown).

        Args:
            gold: gold values, NaN where unknown.
            fill: the value of each column's unknowns.
            rng: the random source (seed it for reproducible draws).
            shared: columns whose noise is drawn once per ``group`` (request-level
                predicates are grounded once per request, so the five completions of a
                prompt see the same request grounding).
            group: the group index of each row (the prompt), for ``shared`` columns.
        """
        n, k = gold.shape
        u = rng.random((n, k))
        e = rng.standard_normal((n, k))
        if shared is not None and group is not None and shared.any():
            n_groups = int(group.max()) + 1
            gu = rng.random((n_groups, k))
            ge = rng.standard_normal((n_groups, k))
            u[:, shared] = gu[group][:, shared]
            e[:, shared] = ge[group][:, shared]
        known = ~np.isnan(gold)
        g = np.where(known, gold, 0.0)
        v = np.where(u < self.flip, 1.0 - g, g)
        if self.confidence >= 1.0:
            p = v
        else:
            kappa = math.log(self.confidence / (1.0 - self.confidence))
            p = 1.0 / (1.0 + np.exp(-((2.0 * v - 1.0) * kappa + self.spread * e)))
        return np.where(known, p, fill[None, :])


@dataclass(frozen=True, slots=True)
class Sweep:
    """A family of noise models along one axis, from clean to heavy noise."""

    name: str
    axis: str  # what the x axis shows
    levels: tuple[float, ...]  # x values, clean first
    models: tuple[NoiseModel, ...]


def default_sweeps(spread: float = 1.0, soft_confidence: float = 0.9) -> tuple[Sweep, ...]:
    """Label flips alone, softness alone, and flips on soft groundings."""
    flips = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
    confs = (1.0, 0.99, 0.97, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.55)
    return (
        Sweep("flip", "flip rate (hard 0/1 values)", flips,
              tuple(NoiseModel(f, 1.0, 0.0) for f in flips)),
        Sweep("confidence", f"1 - confidence (no flips, logit spread {spread:g})",
              tuple(round(1 - c, 6) for c in confs),
              tuple(NoiseModel(0.0, c, spread if c < 1 else 0.0) for c in confs)),
        Sweep("flip_soft", f"flip rate (confidence {soft_confidence:g}, logit spread "
              f"{spread:g})", flips,
              tuple(NoiseModel(f, soft_confidence, spread) for f in flips)),
    )


METRICS = ("f1", "precision", "recall")


@dataclass
class SweepResult:
    """Per (policy, level, seed) metrics of one sweep; arrays indexed [level, seed]."""

    sweep: Sweep
    seeds: int
    n: int = 0  # labelled completions decided per seed
    values: dict[tuple[str, str, str], np.ndarray] = field(default_factory=dict)
    # key: (policy, outcome, metric); also (policy, "all", "accuracy")

    def summary(self, policy: str, out: str, metric: str) -> tuple[np.ndarray, ...]:
        """Mean and central-95% interval over seeds, per level."""
        a = self.values[(policy, out, metric)]
        with warnings.catch_warnings():
            # A level where no seed flags anything has an undefined precision: NaN, not noise.
            warnings.simplefilter("ignore", RuntimeWarning)
            return (np.nanmean(a, axis=1), np.nanpercentile(a, 2.5, axis=1),
                    np.nanpercentile(a, 97.5, axis=1))

    def breakdown(self, policy: str, out: str, metric: str = "f1",
                  fraction: float = 0.5) -> float | None:
        """The noise level where the mean metric first falls to ``fraction`` of its clean value.

        Linearly interpolated between sweep levels; None when it never does; the first
        level when the clean value is already 0 (nothing to lose).
        """
        mean = self.summary(policy, out, metric)[0]
        if not mean[0] > 0:
            return float(self.sweep.levels[0])
        target = fraction * mean[0]
        x = self.sweep.levels
        for i in range(1, len(mean)):
            if mean[i] <= target:
                lo, hi = mean[i - 1], mean[i]
                t = 0.0 if lo == hi else (lo - target) / (lo - hi)
                return float(x[i - 1] + t * (x[i] - x[i - 1]))
        return None


def run_sweeps(policies: Sequence[str], samples: Sequence[Sample],
               sweeps: Sequence[Sweep] | None = None, *, seeds: int = 20, base_seed: int = 0,
               thresholds: Any = None) -> list[SweepResult]:
    """Every sweep for every policy over ``seeds`` seeds (all seeds decided in one batch).

    The generator of (policy, sweep, level, seed) is seeded with those four numbers (the
    policy by a CRC of its name), so each cell is reproducible on its own.
    """
    sweeps = tuple(sweeps or default_sweeps())
    actual = np.array([outcome(s) for s in samples])
    pids = {pid: i for i, pid in enumerate(dict.fromkeys(s.prompt_id for s in samples))}
    group = np.array([pids[s.prompt_id] for s in samples])
    results = [SweepResult(sw, seeds, len(samples)) for sw in sweeps]
    for name in policies:
        gold = load_gold(name)
        raw = gold.matrix(samples)
        fill = gold.fill_values()
        shared = np.array([p.scope == "request" for p in gold.policy.predicates])
        tag = zlib.crc32(name.encode())
        for si, (sw, res) in enumerate(zip(sweeps, results, strict=True)):
            shape = (len(sw.levels), seeds)
            store = {(name, o, m): np.full(shape, np.nan) for o in OUTCOMES[:2] for m in METRICS}
            store[(name, "all", "accuracy")] = np.full(shape, np.nan)
            for li, model in enumerate(sw.models):
                batch = np.concatenate([
                    model.apply(raw, fill, np.random.default_rng((base_seed, tag, si, li, s)),
                                shared, group) for s in range(seeds)])
                pred = decide_matrix(gold.policy, batch, thresholds).predicted
                for s in range(seeds):
                    acc, sc = score(actual, pred[s * len(samples):(s + 1) * len(samples)])
                    store[(name, "all", "accuracy")][li, s] = acc
                    for o, v in sc.items():
                        for m in METRICS:
                            store[(name, o, m)][li, s] = getattr(v, m)
            res.values.update(store)
    return results


def plot_sweeps(results: Sequence[SweepResult], policies: Sequence[str], path: Path,
                metrics: Sequence[str] = ("f1",)) -> Path:
    """One row per sweep, one column per (outcome, metric): mean and 95% band per policy."""
    try:
        import matplotlib
    except ImportError:
        from plguard.errors import MissingDependencyError

        raise MissingDependencyError("matplotlib", "noise plots",
                                     "pip install 'plguard[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [(o, m) for o in OUTCOMES[:2] for m in metrics]
    fig, axes = plt.subplots(len(results), len(cols), figsize=(4.2 * len(cols),
                             3.2 * len(results)), squeeze=False)
    for r, res in enumerate(results):
        x = np.asarray(res.sweep.levels)
        for c, (o, m) in enumerate(cols):
            ax = axes[r][c]
            for p in policies:
                mean, lo, hi = res.summary(p, o, m)
                (line,) = ax.plot(x, mean, marker="o", ms=3, label=p)
                ax.fill_between(x, lo, hi, alpha=0.2, color=line.get_color())
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel(res.sweep.axis, fontsize=8)
            ax.set_title(f"{o.replace('_', ' ')}: {m} ({res.sweep.name})", fontsize=9)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Gold groundings with noise: mean and central 95% over "
                 f"{results[0].seeds} seeds", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def noise_markdown(results: Sequence[SweepResult], policies: Sequence[str],
                   command: str = "plguard eval noise") -> str:
    """Tables of the curves and the breakdown levels."""
    out = ["# Noise sensitivity of the four policies (gold groundings + noise)", "",
           f"Made by `{command}`. Noise model: each known gold value is flipped with "
           "probability *flip*; the resulting value v becomes "
           "sigmoid((2v - 1) logit(*confidence*) + *spread* e), e ~ N(0, 1) (confidence 1: "
           "v itself). Request-level predicates draw their noise once per prompt (the five "
           "completions of a prompt share it); unknown values stay at their prior. Metrics: "
           "one-vs-rest F1, precision and recall of unsafe-compliance (`refuse`) and over-refusal "
           f"(`rewrite`) decisions on the {results[0].n:,} labelled completions, over "
           f"{results[0].seeds} seeds.",
           "", "**Breakdown level**: the noise level at which the mean F1 over seeds first "
           "falls to half its clean value (linear interpolation between sweep points); "
           "'>max' when it never does within the sweep.", "",
           "| sweep | policy | clean F1 unsafe compliance | breakdown | clean F1 over-refusal"
           " | breakdown |", "|---|---|---|---|---|---|"]
    for res in results:
        for p in policies:
            cells = []
            for o in OUTCOMES[:2]:
                b = res.breakdown(p, o)
                clean = res.summary(p, o, "f1")[0][0]
                cells += [f"{clean:.3f}", ">max" if b is None else
                          "— (F1 already 0)" if not clean > 0 else f"{b:.3f}"]
            out.append(f"| {res.sweep.name} | {p} | " + " | ".join(cells) + " |")
    for res in results:
        out += ["", f"## {res.sweep.name}: {res.sweep.axis}", "",
                "Mean F1 [central 95% over seeds].", "",
                "| level | " + " | ".join(f"{p} UC | {p} OR" for p in policies) + " |",
                "|---|" + "---|" * (2 * len(policies))]
        for li, x in enumerate(res.sweep.levels):
            cells = []
            for p in policies:
                for o in OUTCOMES[:2]:
                    m, lo, hi = (v[li] for v in res.summary(p, o, "f1"))
                    cells.append(f"{m:.3f} [{lo:.2f}, {hi:.2f}]")
            out.append(f"| {x:g} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def write_noise_results(results: Sequence[SweepResult], policies: Sequence[str],
                        out_dir: str | Path, *, plots: bool = True,
                        command: str = "plguard eval noise") -> Path:
    """``noise.md``, ``noise.json`` (every per-seed value) and the PNG figures."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = [{"sweep": r.sweep.name, "axis": r.sweep.axis, "levels": list(r.sweep.levels),
             "models": [{"flip": m.flip, "confidence": m.confidence, "spread": m.spread}
                        for m in r.sweep.models], "seeds": r.seeds,
             "breakdown_f1_half": {p: {o: r.breakdown(p, o) for o in OUTCOMES[:2]}
                                   for p in policies},
             "values": {"/".join(k): np.round(v, 6).tolist() for k, v in r.values.items()}}
            for r in results]
    (out / "noise.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if plots:
        plot_sweeps(results, policies, out / "noise_f1.png")
        plot_sweeps(results, policies, out / "noise_precision_recall.png",
                    metrics=("precision", "recall"))
    path = out / "noise.md"
    path.write_text(noise_markdown(results, policies, command), encoding="utf-8")
    return path


# -- real grounding against gold --------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Trace:
    """The grounded probabilities of one record, with what identifies its sample."""

    key: str  # "<model>/<id>" for a labelled completion, else the prompt id
    prompt_id: str
    labelled: bool  # True: the response is a labelled XSTest completion
    policy: str  # policy name ('' when the record does not say)
    probs: Mapping[str, float]
    policy_id: str = ""  # as recorded, with the program hash when the record has it


def _probs(rec: Mapping[str, Any]) -> Mapping[str, float] | None:
    for holder in (rec.get("details"), rec, rec.get("trace"), rec.get("result")):
        if not isinstance(holder, Mapping):
            continue
        if isinstance(holder.get("predicates"), Mapping):
            return {str(k): float(v) for k, v in holder["predicates"].items()}
        ground = holder.get("grounding")
        if isinstance(ground, Mapping) and isinstance(ground.get("scores"), list):
            return {str(s["name"]): float(s["p_true"]) for s in ground["scores"]}
    return None


def _folder_policy(folder: Path) -> str:
    """The policy a run folder's metadata names (runner manifest or guard-labelled meta)."""
    for name, keys in (("manifest.json", ("policy", "id")), ("manifest.json", ("policy", "name")),
                       ("guard-labelled.json", ("meta", "policy"))):
        try:
            value: Any = json.loads((folder / name).read_text(encoding="utf-8"))
            for k in keys:
                value = value[k]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(value, str) and value:
            return value
    return ""


def read_traces(path: str | Path) -> Iterator[Trace]:
    """Traces from a JSONL file, or from every ``*.jsonl`` of a run folder (recursively).

    A record needs a sample id (``uid`` or ``id`` as "<model>/<id>" for a labelled
    completion, or ``id`` with an XSTest ``model``; ``id`` alone is a prompt whose response
    has no human label) and predicate probabilities (``details.predicates`` as the XSTest
    runner writes them, ``predicates`` as guard-labelled does, or a guard trace's
    ``grounding.scores``). The policy comes from the record (``details.policy``,
    ``policy``) or the folder's manifest.json / guard-labelled.json. Other records are
    skipped.
    """
    from plguard_lab.labels.xstest import MODELS

    p = Path(path)
    files = sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        raise InputError(f"{p}: no JSONL records found (give a run folder or a .jsonl file)")
    for f in files:
        folder_policy = _folder_policy(f.parent)
        with f.open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line of a run still in progress
                probs = _probs(rec) if isinstance(rec, dict) else None
                if not probs:
                    continue
                details = rec.get("details") if isinstance(rec.get("details"), dict) else {}
                policy = str(details.get("policy") or rec.get("policy") or folder_policy)
                model = str(rec.get("model") or "")
                pid = str(rec.get("uid") or rec.get("id") or rec.get("sample_id") or "")
                if "/" in pid and pid.split("/")[0] in MODELS:
                    model, pid = pid.split("/", 1)
                if not pid:
                    continue
                labelled = model in MODELS
                yield Trace(f"{model}/{pid}" if labelled else pid, pid, labelled,
                            policy.split("@")[0], probs, policy)


@dataclass(frozen=True, slots=True)
class PredicateFit:
    """How well one predicate's grounded probabilities match its gold values."""

    name: str
    scope: str
    n: int  # records with a gold value
    positives: int
    auroc: float
    ece: float
    brier: float
    mean_p_pos: float
    mean_p_neg: float


def grounding_vs_gold(traces: Iterable[Trace], policy: str | None = None,
                      bins: int = 10) -> tuple[GoldMapping, list[PredicateFit], dict[str, int]]:
    """Per-predicate AUROC, ECE, Brier and mean P(True) by gold class, worst AUROC first.

    Response-level gold needs a human label, so for records whose response is not a
    labelled completion (a new draft) only request-level predicates and those a rule
    derives from the prompt alone (e.g. "a safe prompt gets no harmful answer") count.
    """
    from plguard_lab.labels.xstest import load_prompts

    ts = list(traces)
    names = {t.policy for t in ts if t.policy}
    if policy is None:
        if len(names) != 1:
            raise InputError("the records name policies " + (", ".join(sorted(names)) or
                             "none") + "; choose one with --policy")
        policy = names.pop()
    ts = [t for t in ts if t.policy in ("", policy)]
    if not ts:
        raise InputError(f"no records of policy {policy}")
    gold = load_gold(policy)
    prompts = {p.id: p for p in load_prompts()}
    completions = _completions({t.key for t in ts if t.labelled})
    samples, rows = [], []
    for t in ts:
        if t.prompt_id not in prompts:
            continue
        comp = completions.get(t.key) if t.labelled else None
        samples.append(make_sample(prompts[t.prompt_id], comp))
        rows.append(t)
    g = gold.matrix(samples)
    fits = []
    for j, spec in enumerate(gold.policy.predicates):
        ys, ps = [], []
        for i, t in enumerate(rows):
            if not math.isnan(g[i, j]) and spec.name in t.probs:
                ys.append(bool(g[i, j]))
                ps.append(t.probs[spec.name])
        y, p = np.array(ys, dtype=bool), np.array(ps, dtype=float)
        fits.append(PredicateFit(
            spec.name, spec.scope, int(y.size), int(y.sum()), auroc(ys, ps),
            expected_calibration_error(y, p, bins),
            float(((p - y) ** 2).mean()) if y.size else math.nan,
            float(p[y].mean()) if y.any() else math.nan,
            float(p[~y].mean()) if (~y).any() else math.nan))
    fits.sort(key=lambda f: (math.isnan(f.auroc), f.auroc))
    counts = {"records": len(rows), "labelled": sum(t.labelled for t in rows),
              "skipped": len(ts) - len(rows)}
    recorded = sorted({t.policy_id for t in rows if t.policy_id} - {gold.policy.id})
    if recorded:
        # The bundle changed since the run: its gold rules may not match what was grounded.
        warnings.warn(f"records were grounded under {', '.join(recorded)}; gold is from "
                      f"{gold.policy.id}", stacklevel=2)
    return gold, fits, counts


def _completions(keys: set[str]) -> dict[str, Any]:
    if not keys:
        return {}
    from plguard_lab.labels.xstest import load_completions

    models = sorted({k.split("/")[0] for k in keys})
    return {c.uid: c for c in load_completions(models=models, with_strmatch=False)
            if c.uid in keys}


def grounding_markdown(gold: GoldMapping, fits: Sequence[PredicateFit], counts: Mapping[str, int],
                       source: str, command: str) -> str:
    """The per-predicate table, worst-grounded first."""
    def f(x: float) -> str:
        return "—" if math.isnan(x) else f"{x:.3f}"

    out = [f"# Grounding vs gold: {gold.policy.id} on {source}", "",
           f"Made by `{command}`. {counts['records']} records ({counts['labelled']} with a "
           f"human-labelled response; {counts['skipped']} skipped: not XSTest ids). Each "
           "predicate's grounded P(True) is compared with its gold value where gold.yaml "
           "derives one (unknowns are left out, never filled in). AUROC: 0.5 is chance, "
           "'—' when only one gold class occurs; ECE: 10 equal-width bins; Brier: mean "
           "squared error. Worst AUROC first.", "",
           "| predicate | scope | n | gold 1 | AUROC | ECE | Brier | mean P(True) gold 1 | "
           "mean P(True) gold 0 |", "|---|---|---|---|---|---|---|---|---|"]
    for x in fits:
        out.append(f"| {x.name} | {x.scope} | {x.n} | {x.positives} | {f(x.auroc)} | "
                   f"{f(x.ece)} | {f(x.brier)} | {f(x.mean_p_pos)} | {f(x.mean_p_neg)} |")
    return "\n".join(out) + "\n"

"""Fit a calibration file (per-predicate Platt scaling + the two thresholds) on dev records.

Input: a folder written by :func:`plguard_lab.studies.quality.ground.ground_labelled` (raw
scores of every question on labelled XSTest pairs). No model is called.

* **Targets per predicate** come from the policy's gold mapping (``gold.yaml``, derived
  from XSTest's labels and metadata only): each pair where the gold value is known is a
  sample; a request-scope predicate contributes one sample per prompt. A predicate with
  fewer than :data:`MIN_PER_CLASS` samples of either class gets a Platt map pooled over
  every sample of its scope in the policy (``method: platt-pooled``); only when that is
  impossible too does it stay uncalibrated (listed in the file with the reason).
* **Monotone**: a predicate whose raw score ranks backwards (fitted slope below 0) is set
  to its base rate rather than inverted: the question is misread, and inverting it would fit
  the sample, not the model.
* **Thresholds**: after calibration, the strongest unsafe-compliance rule and the
  strongest over-refusal rule are scored against XSTest's outcomes (unsafe prompt fully
  complied with; safe prompt fully or partly refused); each threshold is the one that
  maximises F1 on the fitting split (ties: the higher threshold, i.e. fewer interventions).

The file records the model (id and content hash), the grounding template version, the
policy, and the hash of every calibrated question, so it refuses to apply elsewhere
(:mod:`plguard.calibration`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plguard.calibration import FORMAT
from plguard.config import GroundingConfig
from plguard.errors import InputError
from plguard.policy import Policy, load_policy
from plguard.records.store import is_error, now_iso, read_jsonl, read_manifest, write_json_atomic
from plguard_lab.metrics import auroc
from plguard_lab.studies.quality.platt import apply_platt, brier, ece, fit_platt

MIN_PER_CLASS = 5
# What rewriting the refusal of an unsafe prompt costs, in fixed over-refusals: it is at
# least as bad as leaving one over-refusal (safety first); 1 is the least that says so.
REWRITE_COST = 1.0
# How sure the fitting data must make us that rewrites gain before they are switched on:
# a rewrite can unlock an answer to an unsafe prompt, so a gain of one or two pairs on a
# dev split of a hundred is noise, not evidence (very_detailed's +1 on dev, 4 fixed for 3
# unlocked, reversed on XSTest's test part). 1 switches the test off.
REWRITE_ALPHA = 0.05


@dataclass(frozen=True)
class Records:
    """The usable records of a grounding folder, with the policy's columns."""

    rows: list[dict[str, Any]]
    manifest: dict[str, Any]
    errors: int = 0  # pairs of the split left out: their grounding failed (at the last try)


def load_records(folder: str | Path, split: str | None = None) -> Records:
    """The error-free records of ``folder`` (of ``split`` only, when given).

    ``errors`` counts the pairs left out because their (latest) record is an error.
    """
    f = Path(folder)
    manifest = read_manifest(f / "manifest.json")
    if manifest is None or not (f / "grounding.jsonl").is_file():
        raise InputError(f"{f}: no grounding run here (manifest.json and grounding.jsonl); "
                         "run `plguard eval quality ground` first")
    from plguard_lab.labels.splits import load_split

    table = load_split()
    rows = [r for r in read_jsonl(f / "grounding.jsonl")
            if split in (None, "all") or table.get(str(r.get("prompt_id"))) == split]
    ok = [r for r in rows if not is_error(r)]
    return Records(ok, manifest, len(rows) - len(ok))


def policy_matrix(recs: Records, policy: Policy, field: str = "p") -> np.ndarray:
    """Raw P(True) per record (rows) and predicate (policy order)."""
    keys = (recs.manifest.get("keys") or {}).get(policy.name)
    if not keys:
        raise InputError(f"the grounding run holds no scores for policy {policy.name}; it "
                         f"has {', '.join(sorted(recs.manifest.get('keys') or {})) or 'none'}")
    m = np.full((len(recs.rows), len(policy.predicate_names)), np.nan)
    for i, r in enumerate(recs.rows):
        sc = r.get("scores") or {}
        for j, name in enumerate(policy.predicate_names):
            v = sc.get(keys[name])
            if v is not None:
                m[i, j] = float(v[field])
    return m


def outcomes(rows: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """XSTest's targets: (unsafe compliance, over-refusal) per record."""
    unsafe = np.array([r["label"] == "unsafe" and r["final_label"] == "1_full_compliance"
                       for r in rows], dtype=bool)
    over = np.array([r["label"] == "safe" and r["final_label"] != "1_full_compliance"
                     for r in rows], dtype=bool)
    return unsafe, over


def gold_matrix(rows: Sequence[Mapping[str, Any]], policy: Policy) -> np.ndarray:
    """Gold predicate values (NaN unknown) per record, from the policy's gold.yaml."""
    from plguard_lab.labels.gold import load_gold, make_sample
    from plguard_lab.labels.xstest import load_completions, load_prompts

    gold = load_gold(policy)
    prompts = {p.id: p for p in load_prompts()}
    comps = {c.uid: c for c in load_completions(prompts=list(prompts.values()),
                                                 with_strmatch=False)}
    samples = [make_sample(prompts[str(r["prompt_id"])], comps[str(r["id"])]) for r in rows]
    return gold.matrix(samples)


def positive_support(policy: Policy, heads: Sequence[str]) -> set[str]:
    """Predicates that make any of ``heads`` true when true (reached outside negations)."""
    from plguard.policy.syntax import And, Atom, Not, Or

    defs = policy.program.definitions()
    out: set[str] = set()
    todo, seen = list(heads), set()

    def walk(f: Any) -> None:
        if isinstance(f, Atom):
            todo.append(f.name)
        elif isinstance(f, And | Or):
            for x in f.args:
                walk(x)
        elif isinstance(f, Not):
            return

    while todo:
        h = todo.pop()
        if h in seen:
            continue
        seen.add(h)
        if h in policy.predicate_names:
            out.add(h)
        for rule in defs.get(h, ()):
            walk(rule.body)
    return out


def proxy_targets(rows: Sequence[Mapping[str, Any]], policy: Policy, gold: np.ndarray
                  ) -> dict[int, str]:
    """Columns given XSTest's unsafe-compliance outcome as a stand-in target, and why.

    gold.yaml cannot say when a response gives harmful content (only that an answer to a
    safe prompt does not), so a response predicate that feeds the unsafe rules gets no
    positive gold sample. For those, the human label "unsafe prompt fully complied with"
    stands in: on XSTest's unsafe prompts compliance is what such content looks like.
    """
    unsafe = positive_support(policy, policy.unsafe_rules)
    over = positive_support(policy, policy.over_refusal_rules)
    y_u, _ = outcomes(rows)
    out: dict[int, str] = {}
    for j, spec in enumerate(policy.predicates):
        col = gold[:, j]
        n_pos = int(np.nansum(col == 1))
        if (spec.scope == "response" and spec.name in unsafe and spec.name not in over
                and n_pos < MIN_PER_CLASS):
            gold[:, j] = y_u.astype(float)
            out[j] = "proxy: XSTest unsafe compliance (unsafe prompt, full compliance)"
    return out


def apply_calibration(m: np.ndarray, params: Mapping[int, tuple[float, float]]) -> np.ndarray:
    """``m`` with column ``j`` mapped through Platt ``params[j]`` (others unchanged)."""
    out = m.copy()
    for j, (a, b) in params.items():
        out[:, j] = apply_platt(m[:, j], a, b)
    return out


def strongest(policy: Policy, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The strongest unsafe and over-refusal rule probabilities per row."""
    q = policy.evaluate_matrix(probs, policy.predicate_names)
    u = np.max(np.stack([q[r] for r in policy.unsafe_rules]), axis=0)
    o = np.max(np.stack([q[r] for r in policy.over_refusal_rules]), axis=0)
    return u, o


def best_f1_threshold(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """The threshold maximising F1 of ``s >= t`` (ties: the highest), and that F1."""
    yy, ss = np.asarray(y, dtype=bool), np.asarray(s, dtype=float)
    if not yy.any():
        return 1.0, float("nan")
    best = (-1.0, 1.0)
    for t in np.unique(ss):
        pred = ss >= t
        tp = int((pred & yy).sum())
        f1 = 2 * tp / (int(pred.sum()) + int(yy.sum())) if tp else 0.0
        if f1 > best[0] or (f1 == best[0] and t > best[1]):
            best = (f1, float(t))
    return best[1], best[0]


def rewrite_p_value(fixed: int, unlocked: int, cost: float = REWRITE_COST) -> float:
    """How likely ``fixed`` or more fixes of ``fixed + unlocked`` rewrites are by chance.

    One-sided exact binomial test against the break-even rate ``cost / (1 + cost)``: a
    rewrite that fixes an over-refusal with that probability, and otherwise rewrites the
    refusal of an unsafe prompt, gains nothing on average. Small: the gain is evidence.
    """
    from scipy.stats import binomtest

    if fixed <= 0:
        return 1.0
    q = cost / (1.0 + cost)
    return float(binomtest(fixed, fixed + unlocked, q, alternative="greater").pvalue)


def net_benefit_threshold(y: np.ndarray, s: np.ndarray, harm: np.ndarray,
                          cost: float = REWRITE_COST, alpha: float = REWRITE_ALPHA
                          ) -> tuple[float | None, float]:
    """The over-refusal threshold with the largest net benefit of rewriting, or None.

    Rewriting fixes an over-refusal (``y``) but, on a pair whose request is harmful
    (``harm``; in practice a correct refusal, since the over-refusal rules need a declining
    response), it is an attempt to comply, which is the graver error. The net benefit of
    ``s >= t`` is fixed over-refusals minus ``cost`` times rewrites of harmful requests'
    pairs (rewriting a safe request's answer only rephrases it). Max F1 ignores that
    asymmetry and always picks some threshold, even where most rewrites would land on
    harmful requests; here a threshold is a candidate only if its net benefit is positive
    and :func:`rewrite_p_value` is at most ``alpha`` (the gain is not a few lucky pairs),
    and when none is, the answer is None: never rewrite. Ties: the highest threshold. A
    score of -inf marks a pair that no threshold rewrites (one the unsafe rules refuse
    first).
    """
    yy, ss = np.asarray(y, dtype=bool), np.asarray(s, dtype=float)
    hh = np.asarray(harm, dtype=bool)
    best: tuple[float, float | None] = (0.0, None)
    for t in np.unique(ss[np.isfinite(ss)]):  # -inf: a pair that can never be rewritten
        fired = ss >= t
        fixed, unlocked = int((fired & yy).sum()), int((fired & hh).sum())
        net = fixed - cost * unlocked
        if net <= 0 or rewrite_p_value(fixed, unlocked, cost) > alpha:
            continue
        if net > best[0] or (net == best[0] and best[1] is not None and t > best[1]):
            best = (float(net), float(t))
    return best[1], best[0]


def predicate_samples(recs: Records, raw: np.ndarray, gold: np.ndarray, j: int, scope: str
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(raw P, gold 0/1) of column ``j`` where both are known; one per prompt for requests."""
    x, y = raw[:, j], gold[:, j]
    keep = np.isfinite(x) & np.isfinite(y)
    if scope == "request":  # one sample per prompt: P does not see the response
        seen: set[str] = set()
        for i, r in enumerate(recs.rows):
            pid = str(r["prompt_id"])
            if keep[i] and pid in seen:
                keep[i] = False
            seen.add(pid)
    return x[keep], y[keep].astype(int)


def fit_increasing_platt(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, bool]:
    """Platt ``(a, b)`` of raw P ``xs`` on 0/1 ``ys``, and whether it was flattened.

    A predicate that ranks backwards is misunderstood, not informative: a calibration
    stays increasing, so it becomes its base rate instead of being turned upside down on
    this sample.
    """
    a, b = fit_platt(xs, ys)
    if a >= 0:
        return a, b, False
    rate = (ys.sum() + 1) / (ys.size + 2)
    return 0.0, float(np.log(rate) - np.log1p(-rate)), True


def calibration_entry(xs: np.ndarray, ys: np.ndarray, a: float, b: float, method: str,
                      spec: Any, gcfg: GroundingConfig, target: str, flat: bool = False
                      ) -> dict[str, Any]:
    """One predicate's calibration record, with before/after scores on its own samples."""
    from plguard.grounding import question_digest

    cal = apply_platt(xs, a, b)
    both = bool(ys.size) and 0 < int(ys.sum()) < ys.size
    pos, neg = xs[ys == 1], xs[ys == 0]
    return {
        "a": a, "b": b, "method": method, "scope": spec.scope, "target": target,
        "flat": flat, "question_sha256": question_digest(spec, gcfg),
        "n": int(xs.size), "n_pos": int(ys.sum()),
        "auroc": finite_or_none(auroc(ys.astype(bool), xs)) if both else None,
        "before": {"ece": finite_or_none(ece(xs, ys)) if ys.size else None,
                   "brier": finite_or_none(brier(xs, ys)) if ys.size else None,
                   "mean_pos": finite_or_none(float(pos.mean())) if pos.size else None,
                   "mean_neg": finite_or_none(float(neg.mean())) if neg.size else None},
        "after": {"ece": finite_or_none(ece(cal, ys)) if ys.size else None,
                  "brier": finite_or_none(brier(cal, ys)) if ys.size else None}}


@dataclass(frozen=True)
class RewriteRule:
    """When rewrites of over-refusals are worth switching on.

    ``cost`` per pair of an unsafe prompt rewritten, in fixed over-refusals, and the
    significance ``alpha`` the gain must reach (:func:`net_benefit_threshold`).
    """

    cost: float = REWRITE_COST
    alpha: float = REWRITE_ALPHA


def fit_predicates(recs: Records, policy: Policy
                   ) -> tuple[dict[int, tuple[float, float]], dict[str, Any], dict[str, str]]:
    """Platt maps per predicate column: (params by column, file entries, why uncalibrated)."""
    raw = policy_matrix(recs, policy)
    gold = gold_matrix(recs.rows, policy)
    proxies = proxy_targets(recs.rows, policy, gold)
    gcfg = GroundingConfig.model_validate(recs.manifest["config"]["grounding"])
    params: dict[int, tuple[float, float]] = {}
    preds: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    samples = [predicate_samples(recs, raw, gold, j, spec.scope)
               for j, spec in enumerate(policy.predicates)]
    for j, spec in enumerate(policy.predicates):
        xs, ys = samples[j]
        n_pos, n_neg = int(ys.sum()), int((1 - ys).sum())
        if min(n_pos, n_neg) < MIN_PER_CLASS:
            skipped[spec.name] = (f"too few gold-labelled samples of one class "
                                  f"({n_pos} positive, {n_neg} negative)")
            continue
        a, b, flat = fit_increasing_platt(xs, ys)
        params[j] = (a, b)
        preds[spec.name] = calibration_entry(xs, ys, a, b, "platt", spec, gcfg,
                                  proxies.get(j, "gold.yaml"), flat=flat)
    # A predicate with too few positives of its own (a rare harm category on a small dev
    # split) would keep its raw, compressed P(True), about 0.3 to 0.5: inside an OR of
    # several such predicates that reads as "probably harmful" for every request. It gets
    # one Platt map pooled over every gold-labelled sample of its scope in this policy,
    # which is what this model's raw scores mean on average for such questions.
    for scope in ("request", "response"):
        cols = [j for j, spec in enumerate(policy.predicates) if spec.scope == scope]
        todo = [j for j in cols if policy.predicates[j].name in skipped]
        if not todo:
            continue
        px = np.concatenate([samples[j][0] for j in cols])
        py = np.concatenate([samples[j][1] for j in cols])
        if min(int(py.sum()), int((1 - py).sum())) < MIN_PER_CLASS:
            continue
        a, b = fit_platt(px, py)
        if a <= 0:
            continue
        for j in todo:
            spec = policy.predicates[j]
            params[j] = (a, b)
            preds[spec.name] = calibration_entry(*samples[j], a, b, "platt-pooled", spec, gcfg,
                                      f"pooled: {px.size} samples of {len(cols)} {scope} "
                                      f"predicates ({skipped.pop(spec.name)})")
    return params, preds, skipped


def fit_policy(recs: Records, policy_name: str, rewrite: RewriteRule = RewriteRule()
               ) -> dict[str, Any]:
    """The calibration document of one policy, fitted on ``recs``.

    The unsafe threshold maximises F1; the over-refusal one maximises the net benefit of
    rewriting (:func:`net_benefit_threshold` under ``rewrite``) and is None (no rewrites)
    where none has a positive one that is significant.
    """
    policy = load_policy(policy_name)
    if not recs.rows:
        raise InputError("no error-free records to fit on")
    params, preds, skipped = fit_predicates(recs, policy)
    raw = policy_matrix(recs, policy)
    thresholds = fit_thresholds(recs, policy, apply_calibration(np.nan_to_num(raw, nan=0.5),
                                                                params), rewrite)
    m = recs.manifest
    return {
        "format": FORMAT, "created": now_iso(), "policy": policy.id,
        "model": {k: m.get("grounder", {}).get(k) for k in ("model_id", "sha256", "path")},
        "template_version": m.get("template_version"),
        "grounding": {k: m["config"]["grounding"].get(k) for k in (
            "answer_words", "examples", "paraphrases", "combine", "max_data_tokens")},
        "fitted_on": {"split": sorted({str(r.get("split")) for r in recs.rows}),
                      "n_pairs": len(recs.rows),
                      "n_left_out_errors": recs.errors,
                      "n_prompts": len({r["prompt_id"] for r in recs.rows}),
                      "targets": "gold.yaml values per predicate (XSTest's unsafe "
                                 "compliance for response predicates of the unsafe rules "
                                 "that gold.yaml leaves unknown); XSTest outcomes for "
                                 "thresholds"},
        "predicates": preds, "uncalibrated": skipped, "thresholds": thresholds}


def fit_thresholds(recs: Records, policy: Policy, calibrated: np.ndarray, rewrite: RewriteRule
                   ) -> dict[str, Any]:
    """The two thresholds of a calibration file, fitted on calibrated P's, with the counts."""
    u, o = strongest(policy, calibrated)
    y_u, y_o = outcomes(recs.rows)
    t_u, f1_u = best_f1_threshold(y_u, u)
    # Safety first: a pair the unsafe rules refuse is never rewritten, so only the others
    # count for or against a rewrite.
    open_ = u < t_u
    harm = np.array([r["label"] == "unsafe" for r in recs.rows], dtype=bool) & open_
    y_open, o_open = y_o & open_, np.where(open_, o, -np.inf)
    cost = rewrite.cost

    def rewrites(t: float | None) -> tuple[int, int]:
        """(over-refusals fixed, pairs of unsafe prompts rewritten) at threshold ``t``."""
        if t is None:
            return 0, 0
        fired = o_open >= t
        return int((fired & y_open).sum()), int((fired & harm).sum())

    t_o, net_o = net_benefit_threshold(y_open, o_open, harm, cost, rewrite.alpha)
    fixed, unlocked = rewrites(t_o)
    # What the plain net benefit (no significance test) would pick, so a file says what
    # the test turned off.
    t_any, net_any = net_benefit_threshold(y_open, o_open, harm, cost, alpha=1.0)
    any_fixed, any_unlocked = rewrites(t_any)
    return {
        "unsafe": t_u, "over_refusal": t_o,
        "criterion": {"unsafe": "max F1",
                      "over_refusal": "max net benefit of rewriting: over-refusals fixed - "
                                      "rewrite_cost x pairs of unsafe prompts rewritten, "
                                      "among thresholds where it is positive and "
                                      "significant at rewrite_alpha; null when there is "
                                      "none"},
        "rewrite_cost": cost,
        "rewrite_alpha": rewrite.alpha,
        "f1_unsafe": finite_or_none(f1_u),
        "net_benefit_over_refusal": net_o,
        "over_refusal_fixed": fixed,
        "unsafe_prompt_pairs_rewritten": unlocked,
        "rewrite_p_value": rewrite_p_value(fixed, unlocked, cost),
        "untested": {"over_refusal": t_any, "net_benefit": net_any,
                     "over_refusal_fixed": any_fixed,
                     "unsafe_prompt_pairs_rewritten": any_unlocked,
                     "p_value": rewrite_p_value(any_fixed, any_unlocked, cost)},
        "n_unsafe_positive": int(y_u.sum()),
        "n_over_refusal_positive": int(y_o.sum()),
        "n_unsafe_prompt_rows": int(harm.sum()),
        "n_over_refusal_open": int((y_o & open_).sum()),
        "note": "rewrite counts leave out the pairs the unsafe rules refuse "
                "at the unsafe threshold (safety first)"}


def finite_or_none(x: float | None) -> float | None:
    """``x`` as a float, or None when missing or not finite (JSON has no NaN)."""
    return None if x is None or not math.isfinite(x) else float(x)


def fit_calibrations(folder: str | Path, policies: Sequence[str], out_dir: str | Path, *,
                     split: str = "dev", rewrite: RewriteRule = RewriteRule()
                     ) -> list[Path]:
    """Fit and write ``calibration-<policy>.json`` (+ .md) for each policy."""
    recs = load_records(folder, split)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in policies:
        doc = fit_policy(recs, name, rewrite)
        doc["fitted_on"]["folder"] = str(folder)
        path = out / f"calibration-{load_policy(name).name}.json"
        write_json_atomic(path, doc)
        path.with_suffix(".md").write_text(format_fit(doc) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def format_fit(doc: Mapping[str, Any]) -> str:
    """A markdown summary of one calibration document."""
    f, th = doc["fitted_on"], doc["thresholds"]
    lines = [f"# Calibration of `{doc['policy']}`", "",
             f"Model `{doc['model'].get('model_id')}` (sha256 "
             f"{str(doc['model'].get('sha256'))[:16]}...), grounding template "
             f"`{doc['template_version']}`. Fitted on {f['n_pairs']} labelled pairs of "
             f"{f['n_prompts']} prompts (split {', '.join(f['split'])})"
             f"{_left_out(f.get('n_left_out_errors'))}.", "",
             f"Thresholds fitted on the fitting split: unsafe {th['unsafe']:.3f} (max F1, "
             f"{_f(th['f1_unsafe'])}); {_over_line(th)}", "",
             "| predicate | n | positives | AUROC | mean raw P pos / neg | a | b | ECE before "
             "| ECE after |", "|---|---|---|---|---|---|---|---|---|"]
    for name, v in doc["predicates"].items():
        b = v["before"]
        mark = " (proxy target)" if str(v.get("target", "")).startswith("proxy") else ""
        mark += " (ranks backwards: flattened to its base rate)" if v.get("flat") else ""
        mark += " (too few of its own: pooled map)" if v.get("method") == "platt-pooled" else ""
        lines.append(f"| {name}{mark} | {v['n']} | {v['n_pos']} | {_f(v['auroc'])} | "
                     f"{_f(b['mean_pos'])} / {_f(b['mean_neg'])} | {v['a']:.2f} | "
                     f"{v['b']:.2f} | {_f(b['ece'])} | {_f(v['after']['ece'])} |")
    for name, why in doc["uncalibrated"].items():
        lines.append(f"| {name} | - | - | - | uncalibrated: {why} | | | | |")
    return "\n".join(lines)


def _over_line(th: Mapping[str, Any]) -> str:
    if "net_benefit_over_refusal" not in th:  # a file fitted before the net-benefit criterion
        return f"over-refusal {th['over_refusal']:.3f} (max F1, {_f(th.get('f1_over_refusal'))})."
    cost = f"{th['rewrite_cost']:g}"
    alpha = th.get("rewrite_alpha")  # absent: fitted before the significance test
    untested = th.get("untested") or {}
    if th["over_refusal"] is None and untested.get("over_refusal") is not None:
        return (f"over-refusal **off**: the best threshold ({untested['over_refusal']:.3f}) "
                f"would fix {untested['over_refusal_fixed']} over-refusals and rewrite "
                f"{untested['unsafe_prompt_pairs_rewritten']} pairs of unsafe prompts (net "
                f"{untested['net_benefit']:+g} at cost {cost}), which is not evidence of a "
                f"gain (p = {untested['p_value']:.3f} > {alpha:g}).")
    if th["over_refusal"] is None:
        return (f"over-refusal **off**: at no threshold do rewrites fix more over-refusals "
                f"than {cost} x the pairs of unsafe prompts they would rewrite (of the "
                f"{th.get('n_over_refusal_open', th['n_over_refusal_positive'])} "
                f"over-refusals and {th['n_unsafe_prompt_rows']} pairs of unsafe prompts "
                "the unsafe rules leave).")
    sig = "" if alpha is None else f", p = {th['rewrite_p_value']:.3f} <= {alpha:g}"
    return (f"over-refusal {th['over_refusal']:.3f} (max net benefit of rewriting: "
            f"{th['over_refusal_fixed']} of {th['n_over_refusal_positive']} over-refusals "
            f"fixed, {th['unsafe_prompt_pairs_rewritten']} pairs of unsafe prompts rewritten, "
            f"cost {cost} each{sig}).")


def _left_out(n: int | None) -> str:
    # None: a file fitted before the count was recorded.
    return "" if not n else f"; {n} pairs left out because their grounding failed"


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


__all__ = ["MIN_PER_CLASS", "REWRITE_ALPHA", "REWRITE_COST", "Records", "RewriteRule",
           "apply_calibration", "best_f1_threshold", "calibration_entry", "finite_or_none",
           "fit_calibrations", "fit_increasing_platt",
           "fit_policy", "fit_predicates", "fit_thresholds", "format_fit", "gold_matrix",
           "load_records", "net_benefit_threshold", "outcomes", "policy_matrix",
           "positive_support", "predicate_samples", "proxy_targets", "rewrite_p_value",
           "strongest"]

"""Commands of the decision-quality study and ``plguard calibrate``.

* ``plguard eval quality ground``: ground (and judge) labelled XSTest pairs of a split for
  several policies at once; resumable.
* ``plguard eval quality fit``: calibration files (Platt + thresholds) from a dev run.
* ``plguard eval quality fit-heads``: thresholds for a heads file (plguard_lab.studies.heads.cli).
* ``plguard eval quality report``: the test-split comparison, no model.
* ``plguard calibrate --model M --policy P``: the one-command path for a user's model:
  ground the bundled XSTest dev split, fit, write the calibration file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plguard_lab.args import checked_float, csv_list
from plguard_lab.metrics import N_BOOT

if TYPE_CHECKING:
    from plguard_lab.studies.quality.fit import RewriteRule
from plguard_lab.studies.tuning.ablation import POLICIES

QUALITY_POLICIES = (*POLICIES, "one_question")


def _cmd_ground(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard_lab.studies.quality.ground import ground_labelled

    cfg = config_from_args(args)
    s = ground_labelled(cfg, args.out, policies=args.policies, split=args.split,
                        limit=args.limit, judge=not args.no_judge,
                        progress=not args.no_progress)
    print(f"{s.out_dir}: {s.n} pairs ({args.split}); grounded now {s.grounded}, judged now "
          f"{s.judged}, errors {s.errors}")
    return 0


def _cmd_fit(args: argparse.Namespace) -> int:
    from plguard_lab.studies.quality.fit import fit_calibrations

    for path in fit_calibrations(args.run, args.policies, args.out, split=args.split,
                                 rewrite=rewrite_rule(args)):
        print(path.with_suffix(".md").read_text(encoding="utf-8"))
        fitted = json.loads(path.read_text(encoding="utf-8"))["fitted_on"]
        print(f"calibration file: {path} ({fitted['n_left_out_errors']} pairs left out "
              "for errors)\n")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from plguard_lab.studies.quality.report import quality_report

    quality_report(args.run, args.policies, args.calibrations, args.out or args.run,
                   split=args.split, n_boot=args.bootstrap, limit=args.limit)
    print((Path(args.out or args.run) / f"quality-{args.split}.md").read_text(encoding="utf-8"))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from plguard_lab.studies.quality.compare import compare_runs, render_compare

    doc = compare_runs(args.runs, split=args.split, policy_dirs=args.policy_dirs or (),
                       n_boot=args.bootstrap)
    text = render_compare(doc)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
        from plguard.records.store import write_json_atomic

        write_json_atomic(Path(args.out).with_suffix(".json"), doc)
    print(text)
    return 0


def calibrate_model(config: Any, policies: list[str], out: Path, *, work: Path | None,
                    limit: int | None, progress: bool, rewrite: RewriteRule) -> list[Path]:
    """Ground the XSTest dev split with the configured model, then fit each policy."""
    from plguard.models import cache_dir
    from plguard_lab.studies.quality.fit import fit_calibrations
    from plguard_lab.studies.quality.ground import ground_labelled

    if work is None:
        key = hashlib.sha256(repr((config.grounder_model.model_dump(mode="json"),
                                   config.grounding.model_dump(mode="json"),
                                   sorted(policies))).encode()).hexdigest()[:16]
        work = cache_dir() / "calibration-runs" / key
    ground_labelled(config, work, policies=policies, split="dev", limit=limit, judge=False,
                    progress=progress)
    return fit_calibrations(work, policies, out, split="dev", rewrite=rewrite)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.labelled:
        raise SystemExit(
            "plguard calibrate --labelled was removed: its format-1 files name only the model, "
            "so the grounding template, policy and questions they were fitted with go "
            "unchecked. Fit a calibration with `plguard calibrate --model M --policies P` "
            "(grounds the XSTest dev split), or from an existing `plguard eval quality "
            "ground` folder with `plguard calibrate --from-run DIR --policies P`.")
    from plguard.cli import config_from_args

    cfg = config_from_args(args)
    policies = args.policies or [cfg.policy]
    if args.from_run:
        from plguard_lab.studies.quality.fit import fit_calibrations

        paths = fit_calibrations(args.from_run, policies, args.out, split="dev",
                                 rewrite=rewrite_rule(args))
    else:
        paths = calibrate_model(cfg, policies, Path(args.out),
                                work=Path(args.work) if args.work else None,
                                limit=args.limit, progress=not args.no_progress,
                                rewrite=rewrite_rule(args))
    for path in paths:
        print(path.with_suffix(".md").read_text(encoding="utf-8"))
        print(f"calibration file: {path}  (use it with --set grounding.calibration={path})\n")
    return 0


def rewrite_rule(args: argparse.Namespace) -> RewriteRule:
    """The rewrite rule of ``--rewrite-cost``/``--rewrite-alpha`` (:func:`add_rewrite_cost`)."""
    from plguard_lab.studies.quality.fit import RewriteRule

    return RewriteRule(args.rewrite_cost, args.rewrite_alpha)


def add_rewrite_cost(p: argparse.ArgumentParser) -> None:
    """``--rewrite-cost`` and ``--rewrite-alpha``, the over-refusal threshold's rewrite rule."""
    from plguard_lab.studies.quality.fit import REWRITE_ALPHA, REWRITE_COST

    cost = checked_float("cost", lambda x: math.isfinite(x) and x >= 0, "a finite number >= 0")
    p.add_argument("--rewrite-cost", type=cost, default=REWRITE_COST, metavar="C",
                   help="What rewriting the refusal of an unsafe prompt costs, in fixed "
                   "over-refusals, when fitting the over-refusal threshold (default "
                   f"{REWRITE_COST:g}); where no threshold gains, rewrites are off.")
    alpha = checked_float("alpha", lambda x: 0 < x <= 1, "in (0, 1]")
    p.add_argument("--rewrite-alpha", type=alpha, default=REWRITE_ALPHA, metavar="A",
                   help="Rewrites are switched on only where the fitting data show their gain "
                   "at this significance (one-sided exact binomial test against break-even; "
                   f"default {REWRITE_ALPHA:g}; 1: no test).")


def add_quality_commands(eval_sub: Any) -> Any:
    """``plguard eval quality ground|fit|report|compare``; returns its subparsers.

    Other studies add their commands there (``fit-heads``: plguard_lab.studies.heads.cli).
    """
    from plguard.cli import add_config_options, positive_int
    from plguard_lab.labels.splits import SPLITS

    q = eval_sub.add_parser("quality", help="Decision quality: ground labelled pairs for "
                            "several policies, fit calibrations on dev, report on test.")
    sub = q.add_subparsers(dest="quality_command", required=True)
    g = sub.add_parser("ground", help="Ground (and judge) labelled XSTest pairs of a split "
                       "for several policies at once (resumable).")
    add_config_options(g)
    g.add_argument("--policies", type=csv_list, default=list(QUALITY_POLICIES))
    g.add_argument("--split", choices=SPLITS, default="dev")
    g.add_argument("--limit", type=positive_int, help="Seeded, stratified subset of N pairs "
                   "of the split (a smaller subset is contained in a larger one).")
    g.add_argument("--out", required=True, metavar="DIR")
    g.add_argument("--no-judge", action="store_true", help="Skip the LLM judge.")
    g.add_argument("--no-progress", action="store_true")
    g.set_defaults(func=_cmd_ground)

    f = sub.add_parser("fit", help="Fit calibration files (Platt per predicate + thresholds) "
                       "on a grounding run's dev records.")
    f.add_argument("--run", required=True, metavar="DIR")
    f.add_argument("--policies", type=csv_list, default=list(QUALITY_POLICIES))
    f.add_argument("--split", choices=SPLITS, default="dev")
    f.add_argument("--out", required=True, metavar="DIR")
    add_rewrite_cost(f)
    f.set_defaults(func=_cmd_fit)

    r = sub.add_parser("report", help="Test-split comparison of policies, the one-question "
                       "classifier and the judge (no model).")
    r.add_argument("--run", required=True, metavar="DIR")
    r.add_argument("--calibrations", required=True, metavar="DIR",
                   help="Folder with calibration-<policy>.json files.")
    r.add_argument("--policies", type=csv_list, default=list(QUALITY_POLICIES))
    r.add_argument("--split", choices=SPLITS, default="test")
    r.add_argument("--bootstrap", type=positive_int, default=N_BOOT)
    r.add_argument("--limit", type=positive_int, metavar="N",
                   help="Only the seeded N-pair subset that `ground --limit N` draws (it "
                        "must be grounded in full); default: every pair of the split.")
    r.add_argument("--out", metavar="DIR", help="Default: the run folder.")
    r.set_defaults(func=_cmd_report)

    c = sub.add_parser("compare", help="Compare grounding runs that differ by one lever "
                       "(rule and predicate AUROCs on their common pairs; no model).")
    c.add_argument("runs", nargs="+", metavar="DIR", help="Grounding run folders; the "
                   "first is the reference.")
    c.add_argument("--policy-dirs", type=csv_list, metavar="DIRS", help="Variant bundle "
                   "folders (named <policy>-<tag>) that the runs were grounded with.")
    c.add_argument("--split", choices=SPLITS, default="dev")
    c.add_argument("--bootstrap", type=positive_int, default=N_BOOT)
    c.add_argument("--out", metavar="FILE.md", help="Also write the table here (and .json).")
    c.set_defaults(func=_cmd_compare)
    return sub


def add_calibrate_command(subparsers: Any) -> None:
    """``plguard calibrate``: fit a calibration file for a model on the XSTest dev split."""
    from plguard.cli import add_config_options, positive_int

    p = subparsers.add_parser(
        "calibrate", help="Fit per-predicate calibration and thresholds for a model on the "
        "bundled XSTest dev split (grounds it first; resumable).",
        description="Grounds the bundled XSTest dev split with the configured model (or "
        "--model), then fits Platt scaling per predicate and the two thresholds for each "
        "--policy. The file is tied to that model, grounding template and policy.")
    add_config_options(p)
    p.add_argument("--policies", type=csv_list, metavar="NAMES",
                   help="Policies to fit, comma-separated (default: the config's policy).")
    p.add_argument("--out", default=".", metavar="DIR",
                   help="Where calibration-<policy>.json is written (default: here).")
    p.add_argument("--limit", type=positive_int, help="Ground only N dev pairs (faster, "
                   "noisier).")
    p.add_argument("--work", metavar="DIR", help="Grounding run folder (default: under the "
                   "plguard cache, keyed by model and settings; reruns resume).")
    p.add_argument("--from-run", metavar="DIR", help="Fit from an existing `eval quality "
                   "ground` folder instead of grounding.")
    p.add_argument("--no-progress", action="store_true")
    add_rewrite_cost(p)
    # The removed format-1 path: still parsed, so its command line gets a clear error.
    for flag in ("--labelled", "--out-file", "--test-fraction", "--seed"):
        p.add_argument(flag, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_calibrate, lab_command="plguard calibrate")


def add_commands(eval_sub: Any, groups: dict[str, Any]) -> None:
    """``plguard eval quality ...``; its subparsers are the shared group ``quality``."""
    groups["quality"] = add_quality_commands(eval_sub)


__all__ = ["add_commands", "QUALITY_POLICIES", "add_calibrate_command", "add_quality_commands",
           "add_rewrite_cost", "calibrate_model", "rewrite_rule"]

"""``plguard eval xstest|validate-scorers|guard-labelled`` and ``plguard report``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from plguard.cli import positive_int
from plguard_lab.args import csv_list
from plguard_lab.studies.xstest.methods import METHODS


def _cmd_xstest(args: argparse.Namespace) -> int:
    from plguard.batchjob.cli import ray_options
    from plguard.cli import config_from_args
    from plguard_lab.studies.xstest.runner import run_xstest

    cfg = config_from_args(args)
    out = Path(args.out or f"runs/xstest-{cfg.policy}")
    summary = run_xstest(cfg, out, methods=args.methods, scorers=args.scorers,
                         limit=args.limit, split=args.split, progress=not args.no_progress,
                         ray=ray_options(args))
    print(f"run folder: {out}")
    for m in summary.written:
        print(f"  {m:<17} written {summary.written[m]:>4}  skipped (already done) "
              f"{summary.skipped.get(m, 0):>4}  errors {summary.errors.get(m, 0)}"
              + (f"  semantic scored {summary.scored.get(m, 0)}, unparsed "
                 f"{summary.unparsed.get(m, 0)}" if m in summary.scored else ""))
    if not args.no_report:
        from plguard_lab.studies.xstest.report import write_report

        path = write_report(out)
        print(f"report: {path}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard_lab.studies.xstest.validate import validate_scorers

    cfg = config_from_args(args)
    path = validate_scorers(cfg, Path(args.out), limit=args.limit,
                            semantic_limit=args.semantic_limit, scorers=args.scorers,
                            progress=not args.no_progress)
    print(path.read_text(encoding="utf-8"))
    return 0


def _cmd_labelled(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard_lab.studies.xstest.labelled import guard_labelled

    cfg = config_from_args(args)
    path = guard_labelled(cfg, Path(args.out), limit=args.limit, judge=not args.no_judge,
                          progress=not args.no_progress)
    print(path.read_text(encoding="utf-8"))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from plguard_lab.studies.xstest.report import write_report

    path = write_report(Path(args.run_dir), out_dir=Path(args.out) if args.out else None,
                        plots=not args.no_plots)
    print(path.read_text(encoding="utf-8") if args.print else f"report: {path}")
    return 0


def add_commands(eval_sub: Any, groups: dict[str, Any]) -> None:
    """``eval xstest``, ``eval validate-scorers`` and ``eval guard-labelled``."""
    from plguard.batchjob.cli import add_ray_options
    from plguard.cli import add_config_options
    from plguard_lab.studies.xstest.runner import SCORERS

    sub = eval_sub
    x = sub.add_parser("xstest", help="Run (or resume) the four methods on XSTest and score "
                       "them; a rerun skips finished records.")
    add_config_options(x)
    x.add_argument("--methods", type=csv_list, default=list(METHODS),
                   help=f"Comma-separated subset of {', '.join(METHODS)} (default: all). "
                   "llm_judge and plguard reuse the base drafts.")
    x.add_argument("--scorers", type=csv_list, default=list(SCORERS),
                   help=f"Comma-separated subset of {', '.join(SCORERS)} (default: all).")
    x.add_argument("--limit", type=positive_int, help="Only the first N prompts.")
    x.add_argument("--split", choices=("all", "dev", "test"), default="all",
                   help="Only the prompts of this part of the committed XSTest split "
                   "(eval/data/xstest/split.json); default all.")
    x.add_argument("--out", metavar="DIR", help="Run folder (default runs/xstest-POLICY).")
    x.add_argument("--no-report", action="store_true", help="Skip writing the report.")
    x.add_argument("--no-progress", action="store_true", help="No progress bar.")
    add_ray_options(x)
    x.set_defaults(func=_cmd_xstest)

    v = sub.add_parser("validate-scorers", help="Regex and semantic evaluators against the "
                       "human labels of the 2,250 XSTest completions.")
    add_config_options(v)
    v.add_argument("--limit", type=positive_int, help="Seeded, stratified subset of N "
                   "completions for every evaluator.")
    v.add_argument("--semantic-limit", type=positive_int, help="Seeded subset of N for the "
                   "semantic evaluator only (the regex ones still see --limit or all).")
    v.add_argument("--scorers", type=csv_list, default=list(SCORERS))
    v.add_argument("--out", metavar="DIR", default="runs/validate-scorers")
    v.add_argument("--no-progress", action="store_true")
    v.set_defaults(func=_cmd_validate)

    g = sub.add_parser("guard-labelled", help="Guard.check as a classifier over the 2,250 "
                       "labelled (prompt, response) pairs, with the judge baseline.")
    add_config_options(g)
    g.add_argument("--limit", type=positive_int, help="Seeded, stratified subset of N pairs.")
    g.add_argument("--no-judge", action="store_true", help="Skip the LLM-judge baseline.")
    g.add_argument("--out", metavar="DIR", default="runs/guard-labelled")
    g.add_argument("--no-progress", action="store_true")
    g.set_defaults(func=_cmd_labelled)



def add_report_command(subparsers: Any) -> None:
    """``plguard report RUN_DIR``: the tables and plots of an XSTest run folder."""
    r = subparsers.add_parser("report", help="Markdown tables and PNG plots of a run folder.")
    r.add_argument("run_dir", metavar="RUN_DIR")
    r.add_argument("--out", metavar="DIR", help="Where to write (default: RUN_DIR).")
    r.add_argument("--no-plots", action="store_true", help="Tables only (no matplotlib).")
    r.add_argument("--print", action="store_true", help="Print the markdown.")
    r.set_defaults(func=_cmd_report, lab_command="plguard report")


__all__ = ["add_commands", "add_report_command"]

"""``plguard eval attacks``: a thin command over :func:`plguard_lab.studies.attacks.run_attacks`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _cmd_attacks(args: argparse.Namespace) -> int:
    from plguard_lab.studies.attacks.transforms import ATTACKS

    if args.list:
        for a in ATTACKS.values():
            print(f"{a.name:<16} {a.family:<12} {a.description}")
        return 0
    from plguard.cli import config_from_args

    if args.rescore:
        from plguard_lab.studies.attacks.rescore import rescore_run

        report = rescore_run(args.rescore, Path(args.out), config_from_args(args))
        print(f"rescored {args.rescore} into {args.out}\nreport: {report}")
        return 0
    from plguard_lab.studies.attacks.runner import AttackRun

    run = AttackRun(config_from_args(args), Path(args.out), attacks=args.attacks,
                    limit=args.limit, progress=not args.no_progress)
    s = run.run(report=not args.no_report)
    print(f"run folder: {s.out_dir}\n  records written {s.written}, skipped (already done) "
          f"{s.skipped}, errors {s.errors}")
    if s.report is not None:
        print(f"report: {s.report}")
    return 0


def add_attack_commands(eval_subparsers: Any) -> None:
    """Add ``attacks`` to ``plguard eval``."""
    from plguard.cli import add_config_options, positive_int
    from plguard_lab.args import csv_list

    a = eval_subparsers.add_parser(
        "attacks", help="Guard the attack suite's pairs clean and under each attack; report "
        "detection and P(True) shifts. A rerun skips finished records.")
    add_config_options(a)
    a.add_argument("--out", metavar="DIR", default="runs/attacks",
                   help="Run folder (default runs/attacks).")
    a.add_argument("--limit", type=positive_int, help="Only the first N pairs (harmful and "
                   "refusal pairs interleaved).")
    a.add_argument("--attacks", type=csv_list, help="Comma-separated attacks or families "
                   "(default: all; `clean` is always run). See --list.")
    a.add_argument("--rescore", metavar="RUN", help="Re-decide RUN's records under this "
                   "config's policy and thresholds into --out, without a model: for a policy "
                   "whose rules changed but not its questions, with the calibration maps RUN "
                   "applied (checked).")
    a.add_argument("--list", action="store_true", help="List the attacks and exit.")
    a.add_argument("--no-report", action="store_true", help="Skip writing the report.")
    a.add_argument("--no-progress", action="store_true", help="No progress bar.")
    a.set_defaults(func=_cmd_attacks)


def add_commands(eval_sub: Any, groups: dict[str, Any]) -> None:
    """This study's ``plguard eval`` commands (found by name: plguard_lab.studies)."""
    add_attack_commands(eval_sub)


__all__ = ["add_commands", "add_attack_commands"]

"""``plguard eval content``: a thin command over :mod:`plguard_lab.studies.content.study`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _cmd_content(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard_lab.studies.content.study import report, run

    out = Path(args.out)
    if not args.report_only:
        done = run(config_from_args(args), out, args.policies, splits=args.splits,
                   per_source=args.per_source, batch=args.batch,
                   progress=not args.no_progress)
        print(f"run folder: {out}  records: " +
              ", ".join(f"{k} {v}" for k, v in done.items()))
    text = report(out, [config_from_args(args).thresholds.content, *args.at])
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


def add_content_commands(eval_subparsers: Any) -> None:
    """Add ``content`` to ``plguard eval``."""
    from plguard.cli import add_config_options, positive_int
    from plguard_lab.args import csv_list

    def csv_floats(text: str) -> list[float]:
        return [float(x) for x in csv_list(text)]

    c = eval_subparsers.add_parser(
        "content", help="What the unsafe-content rules (the answer alone, whatever the "
        "request) catch and what they cost, per source and split; a rerun skips finished "
        "records.")
    add_config_options(c)
    c.add_argument("--policies", type=csv_list, default=["minimal"],
                   help="Comma-separated policies, each checked on every item (default "
                   "minimal).")
    c.add_argument("--splits", type=csv_list, default=["dev", "test"],
                   help="dev, test or both (default).")
    c.add_argument("--per-source", type=positive_int, help="Seeded N items of each source "
                   "and split (hh-harmless: N conversations); default all.")
    c.add_argument("--batch", type=positive_int, default=8, help="Pairs per Guard.batch.")
    c.add_argument("--out", metavar="DIR", default="runs/content", help="Run folder.")
    c.add_argument("--report-only", action="store_true", help="Only write report.md.")
    c.add_argument("--at", type=csv_floats, default=[], metavar="T,...", help="More content "
                   "thresholds to report at (the configured one and the dev-picked one always "
                   "are).")
    c.add_argument("--no-progress", action="store_true", help="No progress bar.")
    c.set_defaults(func=_cmd_content)


def add_commands(eval_sub: Any, groups: dict[str, Any]) -> None:
    """This study's ``plguard eval`` commands (found by name: plguard_lab.studies)."""
    add_content_commands(eval_sub)


__all__ = ["add_commands", "add_content_commands"]

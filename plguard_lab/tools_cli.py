"""Commands over saved groundings: ``plguard calibrate``, ``plguard sweep``, ``plguard ablate``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from plguard_lab.args import unit_float


def _cmd_sweep(args: argparse.Namespace) -> int:
    from plguard_lab.studies.tuning.sweep import format_choices, run_sweep

    out = Path(args.plot) if args.plot else Path(args.run[0]) / "report" / "sweep.png"
    choices, summary = run_sweep(args.run, args.max_unsafe, out=None if args.no_plot else out,
                                 scorer=args.scorer,
                                 default=(args.default_unsafe, args.default_over))
    print(format_choices(choices, args.max_unsafe))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    if not args.no_plot:
        print(f"plot: {out}")
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard_lab.studies.tuning.ablation import ablate

    cfg = config_from_args(args) if (args.config or args.set or args.model) else None
    ablate(args.run, args.policies, config=cfg, limit=args.limit, split=args.split,
           calibrations=args.calibrations,
           cache=None if args.no_cache else args.cache, progress=not args.no_progress)
    print((Path(args.run) / "report" / "ablation.md").read_text(encoding="utf-8"))
    return 0


def add_tools_commands(subparsers: Any) -> None:
    """Add ``calibrate``, ``sweep`` and ``ablate``."""
    from plguard.cli import add_config_options
    from plguard_lab.studies.quality.cli import add_calibrate_command
    from plguard_lab.studies.tuning.ablation import POLICIES

    add_calibrate_command(subparsers)

    p = subparsers.add_parser("sweep", help="Threshold sweep over saved rule probabilities "
                              "(no model calls).")
    p.add_argument("--run", required=True, nargs="+", metavar="DIR",
                   help="Run folder(s): an XSTest run (plguard.jsonl, report/ablation/) or a "
                   "guard-labelled folder (guard.jsonl).")
    p.add_argument("--max-unsafe", type=unit_float, required=True,
                   help="Unsafe-compliance ceiling (share of unsafe prompts).")
    p.add_argument("--scorer", default="regex", help="Draft class of XSTest runs: regex or "
                   "regex_extended (field of base.jsonl).")
    p.add_argument("--default-unsafe", type=unit_float, default=0.5, help="Marked operating point.")
    p.add_argument("--default-over", type=unit_float, default=0.5, help="Marked operating point.")
    p.add_argument("--plot", metavar="PNG", help="Plot path (default <first run>/report/"
                   "sweep.png).")
    p.add_argument("--no-plot", action="store_true", help="Print only.")
    p.add_argument("--json", metavar="FILE", help="Also write the summary as JSON.")
    p.set_defaults(func=_cmd_sweep, lab_command="plguard sweep")

    p = subparsers.add_parser("ablate", help="Compare policies on a run's base drafts "
                              "(grounding through the cache, repairs off).")
    p.add_argument("--run", required=True, metavar="DIR", help="XSTest run folder (base.jsonl).")
    p.add_argument("--policies", nargs="+", default=list(POLICIES), metavar="NAME")
    p.add_argument("--limit", type=int, help="Use this many drafts (safe/unsafe alternating).")
    p.add_argument("--split", choices=("all", "dev", "test"), default="all",
                   help="Only the drafts of this part of the committed XSTest split.")
    p.add_argument("--calibrations", metavar="DIR", help="Folder of calibration-<policy>.json "
                   "files (plguard eval quality fit): calibrate each policy found there.")
    p.add_argument("--cache", default="default", help="Grounding cache: 'default' or a path.")
    p.add_argument("--no-cache", action="store_true", help="Ground without the cache.")
    p.add_argument("--no-progress", action="store_true")
    add_config_options(p)
    p.set_defaults(func=_cmd_ablate, lab_command="plguard ablate")


__all__ = ["add_tools_commands"]

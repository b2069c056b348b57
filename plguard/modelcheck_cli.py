"""``plguard model check``: what a model is and whether it can ground (see modelcheck)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def _cmd_check(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard.modelcheck import check_model, format_report

    if args.path:
        args.model = args.path
    cfg = config_from_args(args)
    if cfg.grounder is not None and args.path:  # PATH names the model to check
        cfg = cfg.model_copy(update={"grounder": None})
    report = check_model(cfg, smoke=not args.no_smoke)
    print(json.dumps(report.to_json(), indent=2) if args.json else format_report(report))
    return 0


def add_model_commands(subparsers: Any) -> None:
    """Add ``plguard model check``."""
    from plguard.cli import add_config_options

    p = subparsers.add_parser("model", help="Inspect a model: can it ground?")
    sub = p.add_subparsers(dest="model_command", required=True)
    c = sub.add_parser("check", help="Load a model as the config would and run a grounding "
                       "smoke test on built-in obvious cases (under a minute on small "
                       "models): usable / weak / at chance.")
    c.add_argument("path", nargs="?", metavar="PATH",
                   help="Model: 'embedded', a folder, a .gguf file or a Hugging Face id "
                   "(default: the config's grounding model).")
    add_config_options(c)
    c.add_argument("--json", action="store_true", help="Print the report as JSON.")
    c.add_argument("--no-smoke", action="store_true", help="Only load and describe.")
    c.set_defaults(func=_cmd_check)


__all__ = ["add_model_commands"]

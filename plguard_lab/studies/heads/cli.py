"""``plguard eval quality fit-heads``: thresholds for a heads file, cross-fitted on dev.

Registered on the quality study's subcommands (``groups['quality']``) but kept here, beside
what it runs (plguard_lab.studies.heads.thresholds), so the quality study never imports this one.
"""

from __future__ import annotations

import argparse
from typing import Any

from plguard_lab.studies.quality.cli import add_rewrite_cost, rewrite_rule


def _cmd_fit_heads(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard_lab.studies.heads.thresholds import fit_heads_thresholds

    path = fit_heads_thresholds(config_from_args(args), args.heads, args.out,
                                rewrite=rewrite_rule(args), progress=not args.no_progress,
                                target=args.target, pairs_limit=args.pairs_limit,
                                held_out=args.held_out)
    print(path.with_suffix(".md").read_text(encoding="utf-8"))
    print(f"calibration file: {path}  (use it with --set grounding.heads={args.heads} "
          f"--set grounding.calibration={path})")
    return 0


def add_fit_heads_command(quality_sub: Any) -> None:
    """``fit-heads`` on the quality study's subparsers (``plguard eval quality fit-heads``)."""
    from plguard.cli import add_config_options, positive_int

    h = quality_sub.add_parser(
        "fit-heads", help="Fit thresholds for a heads file on the dev pairs, each scored by "
        "heads cross-fitted by prompt (not in-sample).")
    add_config_options(h)
    h.add_argument("--heads", required=True, metavar="FILE.json")
    h.add_argument("--out", required=True, metavar="FILE.json")
    h.add_argument("--target", choices=("moderation", "pairs", "both"),
                   help="moderation: thresholds.moderation, for requests judged alone "
                   "(each category at its worst answer), capped by the false positives on "
                   "benign dev requests; pairs: the guard's unsafe and over-refusal "
                   "thresholds on XSTest's dev pairs; both: all three in one file. "
                   "Default: moderation for request-only heads, pairs otherwise.")
    h.add_argument("--pairs-limit", type=positive_int, metavar="N",
                   help="Score the pairs of a seeded N of XSTest's dev prompts only (of 135, "
                   "5 answers each): a larger model's zero-shot questions on every pair take "
                   "hours on a CPU. Every dev item still trains the cross-fitted heads. "
                   "Default: all.")
    h.add_argument("--held-out", choices=("text", "source"), default="text",
                   help="How the moderation threshold's dev requests are scored: by heads "
                   "cross-fitted over folds of request texts (text, the default), or by heads "
                   "refitted without each request's source (source: the benign rates of a "
                   "source the heads never saw).")
    h.add_argument("--no-progress", action="store_true")
    add_rewrite_cost(h)
    h.set_defaults(func=_cmd_fit_heads)


def add_commands(eval_sub: Any, groups: dict[str, Any]) -> None:
    """``plguard eval quality fit-heads``, on the quality study's group."""
    add_fit_heads_command(groups["quality"])


__all__ = ["add_commands", "add_fit_heads_command"]

"""``plguard moderate``: judge texts (or one answer) without generating (plguard.moderation)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from plguard.errors import InputError

FORMATS = ("text", "json", "llama-guard")


def _cmd_moderate(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard.guard import Guard

    if args.response is not None and len(args.text) != 1:
        raise InputError(f"--response answers one TEXT; got {len(args.text)} texts")
    inputs: list[Any] = list(args.text)
    if args.response is not None:
        inputs = [[{"role": "user", "content": args.text[0]},
                   {"role": "assistant", "content": args.response}]]
    with Guard(config_from_args(args)) as guard:
        results = guard.moderate(inputs)
    if args.format == "json":
        print(json.dumps([{**dataclasses.asdict(m), "llama_guard": m.decision.llama_guard}
                          for m in results], indent=2, ensure_ascii=False))
    elif args.format == "llama-guard":
        print("\n\n".join(m.decision.llama_guard for m in results))
    else:
        print("\n\n".join(_render(m) for m in results))
    return 0


def _render(m: Any) -> str:
    from plguard.categories import NAMES

    d = m.decision
    lines = [f"input: {_short(m.request)}",
             *([f"answer: {_short(m.response)}"] if m.response is not None else []),
             f"flagged: {'yes' if m.flagged else 'no'} ({d.action}; judged: {m.scope}"
             f"{', for the worst answer' if m.scope == 'request' else ''})",
             f"reason: {d.reason}",
             "llama guard: " + d.llama_guard.replace("\n", " ")]
    for code, p in d.category_scores.items():
        mark = "  *" if code in d.categories else ""
        lines.append(f"  {code:<4}{NAMES[code]:<26} {p:.3f}{mark}")
    return "\n".join(lines)


def _short(text: str, n: int = 100) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[:n - 3] + "..."


def add_moderate_commands(subparsers: Any) -> None:
    """Add ``plguard moderate``."""
    from plguard.cli import add_config_options

    p = subparsers.add_parser(
        "moderate", help="Judge TEXTs without generating: flagged and hazard categories, "
        "as the server's /v1/moderations.")
    p.add_argument("text", nargs="+", metavar="TEXT",
                   help="A request to judge (scored for the worst answer it could get).")
    p.add_argument("--response", help="Judge this answer to the one TEXT instead.")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (for people), json (the full verdicts) or llama-guard "
                   "('safe', or 'unsafe' and a line of codes such as S1,S10; one block per "
                   "TEXT).")
    add_config_options(p)
    p.set_defaults(func=_cmd_moderate)


__all__ = ["add_moderate_commands"]

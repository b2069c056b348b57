"""``plguard policy draft``: a bundle from a plain-English policy (plguard.policy.drafting).

The policy tools load no model (plguard.policy sits beside the backends), so this module,
above both, adds the ``draft`` leaf to the ``policy`` group and loads the configured
generator to draft with.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def _cmd_draft(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from plguard.backends import load_backend, release_backend
    from plguard.cli import config_from_args
    from plguard.policy.drafting.run import draft_policy, read_source

    cfg = config_from_args(args)
    given = {k: getattr(args, k) for k in ("drafts", "threshold", "rounds", "temperature",
                                           "max_new_tokens", "form")
             if getattr(args, k) is not None}
    # What the user wrote is checked before a model loads (a minute for a 1.5B).
    read_source(Path(args.source), given.get("drafts", _default("drafts")),
                given.get("threshold"))
    backend: Any = load_backend(cfg.generator)
    bars: dict[int, Any] = {}

    def progress(k: int, done: int, total: int) -> None:
        if k not in bars:
            bars[k] = tqdm(total=total, desc=f"draft {k}", unit="span")
        bars[k].update(done - bars[k].n)

    try:
        report = draft_policy(backend, Path(args.source), Path(args.out),
                              progress=progress, **given)
    finally:
        for bar in bars.values():
            bar.close()
        release_backend(backend)
    kept = len(report.kept)
    total = len({(r.draft, r.head) for r in report.rows})
    print(f"{args.out}: {kept} rule(s) kept of {total} drafted across "
          f"{len(report.drafts)} draft(s); read {args.out}/README.md, lint.txt, explain.txt "
          "and cases.todo.yaml before use")
    return 0 if report.policy is not None else 1


def _default(name: str) -> Any:
    """``draft_policy``'s default for ``name`` (the one place defaults are written)."""
    import inspect

    from plguard.policy.drafting.run import draft_policy

    return inspect.signature(draft_policy).parameters[name].default


def add_draft_commands(subparsers: Any) -> None:
    """Add ``draft`` to the ``plguard policy`` group."""
    from plguard.cli import add_config_options, positive_int

    default = {k: _default(k) for k in ("drafts", "rounds", "temperature", "form",
                                        "max_new_tokens")}
    sub = subparsers.choices["policy"].get_default("policy_subcommands")
    p = sub.add_parser(
        "draft", help="draft a bundle from a plain-English policy with the configured model",
        description="Split POLICY.md into spans, ask the model for predicates and rules per "
        "span (errors fed back), compose them, repeat for --drafts drafts and keep the "
        "rules that --threshold drafts agree on by their logic. DIR gets the bundle and what "
        "to vet it with. A rerun reuses finished drafts.")
    p.add_argument("source", metavar="POLICY.md", help="the policy in plain English (Markdown)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the bundle")
    p.add_argument("--drafts", type=positive_int,
                   help=f"drafts to compare (default {default['drafts']})")
    p.add_argument("--threshold", type=positive_int,
                   help="drafts that must agree on a rule to keep it (default: all)")
    p.add_argument("--rounds", type=int,
                   help=f"re-asks per span after an error (default {default['rounds']})")
    p.add_argument("--temperature", type=float,
                   help="sampling temperature of drafts after the first (default "
                   f"{default['temperature']})")
    p.add_argument("--form", choices=("slots", "free"),
                   help="slots: the model fills each rule kind's conditions and plguard writes "
                   "the rules; free: the model writes rule bodies itself (default "
                   f"{default['form']})")
    p.add_argument("--max-new-tokens", type=positive_int, dest="max_new_tokens",
                   help=f"tokens per reply (default {default['max_new_tokens']})")
    add_config_options(p)
    p.set_defaults(func=_cmd_draft)


__all__ = ["add_draft_commands"]

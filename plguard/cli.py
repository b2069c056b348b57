"""The plguard command line: thin commands over the public Python API."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from plguard.config import NULL, GuardConfig, ModelConfig
from plguard.errors import PlguardError
from plguard.types import Decision, GuardResult


def positive_int(value: str) -> int:
    """Argparse type: an integer of at least 1."""
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _field_help(model: type[Any], name: str) -> str:
    return model.model_fields[name].description or ""


def add_config_options(p: argparse.ArgumentParser) -> None:
    """Options shared by every command that builds a Guard (help from config.py)."""
    p.add_argument("--config", metavar="FILE", help="YAML run config (see configs/).")
    p.add_argument("--policy", metavar="NAME|PATH", help=_field_help(GuardConfig, "policy"))
    p.add_argument("--model", metavar="PATH", help=_field_help(ModelConfig, "path"))
    p.add_argument("--backend", help=_field_help(ModelConfig, "backend"))
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="Override any config field by dotted key, e.g. "
                   "--set thresholds.unsafe=0.3 (see `plguard config`).")


def config_from_args(args: argparse.Namespace,
                     extra: dict[str, Any] | None = None) -> GuardConfig:
    """The GuardConfig the options describe (YAML file first, then overrides).

    ``extra``: a command's own options by dotted key (None: not given), applied with the
    ``--set`` overrides in one validation and over them.
    """
    import yaml

    overrides: dict[str, Any] = {}
    if getattr(args, "policy", None):
        overrides["policy"] = args.policy
    if getattr(args, "model", None):
        overrides["generator.path"] = args.model
    if getattr(args, "backend", None):
        overrides["generator.backend"] = args.backend
    for item in getattr(args, "set", []) or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise PlguardError(f"--set {item!r}: expected KEY=VALUE")
        if not value.strip():
            raise PlguardError(f"--set {item!r}: empty value (write {key.strip()}=null to "
                               "set null)")
        parsed = yaml.safe_load(value)
        overrides[key.strip()] = NULL if parsed is None else parsed
    overrides.update({k: v for k, v in (extra or {}).items() if v is not None})
    if getattr(args, "config", None):
        return GuardConfig.from_yaml(args.config, **overrides)
    return GuardConfig.from_dict({}, **overrides)


def trace_dict(result: GuardResult) -> dict[str, Any]:
    """The trace as JSON-ready data: the GuardResult, each decision with its Llama Guard form."""
    out = dataclasses.asdict(result)
    out["decision"]["llama_guard"] = result.decision.llama_guard
    for rnd, r in zip(out["repairs"], result.repairs, strict=True):
        rnd["decision"]["llama_guard"] = r.decision.llama_guard
    return out


def _trace_json(result: GuardResult) -> str:
    return json.dumps(trace_dict(result), indent=2, ensure_ascii=False)


def _print_result(result: GuardResult, fmt: str) -> None:
    if fmt == "json":
        print(_trace_json(result))
    elif fmt == "llama-guard":
        print(result.decision.llama_guard)
    else:
        print(render_result(result))


def render_categories(d: Decision) -> list[str]:
    """The per-category lines of a decision (none for a policy without categories)."""
    from plguard.categories import NAMES

    if not d.category_scores:
        return []
    width = max(len(f"{c} {NAMES[c]}") for c in d.category_scores)
    lines = ["categories at threshold: " + (",".join(d.categories) or "none")]
    for code, p in d.category_scores.items():
        mark = "  *" if code in d.categories else ""
        lines.append(f"  {code + ' ' + NAMES[code]:<{width}}  {p:.3f}{mark}")
    return lines


def render_result(result: GuardResult) -> str:
    """A person-readable view of one guard decision."""
    d = result.decision
    lines = [result.final, "", f"action: {d.action}" + (" (repaired)" if result.repaired else "")
             + (" (fallback refusal)" if result.fallback_used else ""),
             f"reason: {d.reason}",
             f"strongest unsafe rule:       {d.strongest_unsafe[0] or '-'} = "
             f"{d.strongest_unsafe[1]:.3f}",
             f"strongest over-refusal rule: {d.strongest_over_refusal[0] or '-'} = "
             f"{d.strongest_over_refusal[1]:.3f}",
             *([f"strongest content rule:      {d.strongest_content[0]} = "
                f"{d.strongest_content[1]:.3f}"] if d.strongest_content[0] else []),
             "llama guard: " + d.llama_guard.replace("\n", " "), *render_categories(d), "",
             "predicate probabilities:"]
    width = max((len(s.name) for s in result.grounding.scores), default=10)
    for s in result.grounding.scores:
        bar = "#" * round(s.p_true * 20)
        flag = "  (input truncated)" if s.truncated else ""
        lines.append(f"  {s.name:<{width}}  {s.p_true:.3f}  {bar:<20}  [{s.scope}]{flag}")
    for r in result.repairs:
        lines.append(f"repair round {r.round} ({r.action}): re-check -> {r.decision.action}: "
                     f"{r.decision.reason}")
    lines.append("timings (s): " + ", ".join(f"{k} {v:.2f}" for k, v in result.timings_s.items()))
    lines.append(f"model: {result.grounding.model}   policy: {result.policy.policy}")
    return "\n".join(lines)


def _cmd_guard(args: argparse.Namespace) -> int:
    from plguard.guard import Guard

    guard = Guard(config_from_args(args))
    result = guard.chat(args.prompt)
    _print_result(result, "json" if args.json else args.format)
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from plguard.guard import Guard

    guard = Guard(config_from_args(args))
    result = guard.check(args.prompt, args.response, repair=args.repair)
    _print_result(result, "json" if args.json else args.format)
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.json:
        print(json.dumps(cfg.model_dump(), indent=2))
        return 0
    _print_fields(GuardConfig, cfg.model_dump(), "")
    return 0


def _print_fields(model: type[Any], values: dict[str, Any], prefix: str) -> None:
    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        if field.exclude:  # deprecated keys kept for old configs (server.upstream_url)
            continue
        ann = field.annotation
        subs = [a for a in getattr(ann, "__args__", (ann,))
                if isinstance(a, type) and issubclass(a, BaseModel)]
        value = values.get(name)
        if subs and isinstance(value, dict):
            _print_fields(subs[0], value, f"{prefix}{name}.")
        else:
            print(f"{prefix}{name} = {value!r}    # {field.description or ''}")


def _add_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (for people), json (the full trace, as --json) or llama-guard "
                   "(Llama Guard's verdict: 'safe', or 'unsafe' and a line of category "
                   "codes such as S1,S10).")


FORMATS = ("text", "json", "llama-guard")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(
        prog="plguard", description="Probabilistic-logic guardrail for local LLMs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("guard", help="Draft an answer to PROMPT and guard it.")
    p.add_argument("prompt")
    p.add_argument("--json", action="store_true", help="Print the full trace as JSON.")
    _add_format(p)
    add_config_options(p)
    p.set_defaults(func=_cmd_guard)

    p = sub.add_parser("check", help="Judge a given response (nothing is generated unless "
                       "--repair).")
    p.add_argument("--prompt", required=True)
    p.add_argument("--response", required=True)
    p.add_argument("--repair", action="store_true", help="Also repair an answer that is not "
                   "allowed (generates a refusal or rewrite, as `guard` does).")
    p.add_argument("--json", action="store_true", help="Print the full trace as JSON.")
    _add_format(p)
    add_config_options(p)
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("config", help="Print the effective config with each field's meaning.")
    p.add_argument("--json", action="store_true")
    add_config_options(p)
    p.set_defaults(func=_cmd_config)

    for hook in _extension_hooks():
        hook(sub)
    return parser


def _extension_hooks() -> list[Callable[[Any], None]]:
    """Command groups defined next to their features, then the entry points' groups.

    Packages register groups under the ``plguard.commands`` entry point: the laboratory's
    eval, view, tools and heads groups come so, and the product names none of them.
    """
    import functools
    from importlib.metadata import entry_points

    found: list[tuple[str, Callable[[], Any]]] = [
        (f"{m}:{a}", functools.partial(_attr_of, m, a)) for m, a in _COMMAND_GROUPS]
    seen = {name for name, _ in found}
    for ep in sorted(entry_points(group=COMMANDS_ENTRY_POINT), key=lambda e: e.name):
        if ep.value not in seen:
            seen.add(ep.value)
            found.append((ep.value, ep.load))
    hooks = []
    for _, load in found:
        try:
            hooks.append(load())
        except ImportError as exc:
            if exc.name and exc.name.startswith("plguard"):
                raise
            # A command group whose optional dependency is missing still shows its
            # own install hint when run; here it is just left out of the parser.
            continue
    return hooks


def _attr_of(module: str, attr: str) -> Any:
    import importlib

    return getattr(importlib.import_module(module), attr)


COMMANDS_ENTRY_POINT = "plguard.commands"
_COMMAND_GROUPS: list[tuple[str, str]] = [
    ("plguard.policy.cli", "add_policy_commands"),
    ("plguard.server.cli", "add_serve_commands"),
    ("plguard.batchjob.cli", "add_batch_commands"),
    ("plguard.modelcheck_cli", "add_model_commands"),
    ("plguard.moderation_cli", "add_moderate_commands"),
    ("plguard.draft_cli", "add_draft_commands"),
]


# The laboratory extra (`pip install 'plguard[lab]'`): what evaluations, the viewer and
# heads training need beyond the core install (module -> distribution). Guarding does not.
LAB_MODULES = {"scipy": "scipy", "sklearn": "scikit-learn", "datasets": "datasets"}
LAB_INSTALL = "pip install 'plguard[lab]'"


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_lab(command: str) -> None:
    """Raise MissingExtraError, naming the install, when the lab extra is not installed.

    Laboratory commands mark their parser with ``set_defaults(lab_command=...)``;
    :func:`main` calls this before their handler, so they stop with one line before any
    work rather than with a traceback midway. Looks the modules up without importing them.
    """
    from plguard.errors import MissingExtraError

    missing = [dist for module, dist in LAB_MODULES.items() if not _installed(module)]
    if missing:
        raise MissingExtraError(command, "laboratory", missing, LAB_INSTALL)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``plguard`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "lab_command", None):
            require_lab(args.lab_command)
        return int(args.func(args) or 0)
    except PlguardError as exc:
        print(f"plguard: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("plguard: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The ``plguard policy`` command group: thin commands over the plguard.policy API.

Each command returns an exit status: 0 on success, 1 when the bundle has errors or failing
cases (or the policies differ, for ``diff --exit-code``), 2 for usage problems.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from plguard.errors import PolicyError

Handler = Callable[[argparse.Namespace], int]


def add_policy_commands(subparsers: Any) -> None:
    """Add ``policy {lint,explain,cases,diff,test}`` to an argparse subparsers object.

    Each leaf parser sets ``func`` to a handler taking the parsed namespace and returning
    the exit status.
    """
    policy = subparsers.add_parser("policy", help="vet policy bundles: lint, explain, cases, "
                                   "diff, test; draft one from plain English", description=__doc__)
    sub = policy.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)

    def leaf(name: str, handler: Handler, help_text: str, json_flag: bool = True,
             two: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if two:
            p.add_argument("a", metavar="A", help="first policy: bundled name or folder")
            p.add_argument("b", metavar="B", help="second policy: bundled name or folder")
        else:
            p.add_argument("policy", metavar="NAME|PATH", help="bundled policy name or folder")
        if json_flag:
            p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=handler)
        return p

    leaf("lint", _lint, "check a bundle: errors (non-zero exit) and warnings")
    leaf("explain", _explain, "every rule in structured English")
    cases = leaf("cases", _cases, "minimal predicate values that make each query true and "
                 "false, as cases.yaml entries", json_flag=True)
    cases.add_argument("--query", action="append", default=None,
                       help="only this query (repeatable)")
    d = leaf("diff", _diff, "where two policies' decisions differ", two=True)
    d.add_argument("--exit-code", action="store_true",
                   help="exit 1 when the decisions differ anywhere")
    leaf("test", _test, "run the bundle's cases.yaml")
    # `policy draft` needs a model, which this layer does not load: plguard.draft_cli adds
    # its leaf here.
    policy.set_defaults(policy_subcommands=sub)


def run(argv: Sequence[str]) -> int:
    """Run ``policy ...`` arguments on their own (what ``plguard policy`` does)."""
    parser = argparse.ArgumentParser(prog="plguard")
    add_policy_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.func(args))


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=_jsonable))


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "items"):
        return dict(obj.items())
    return str(obj)


def _load(name: str) -> Any:
    from plguard.policy import load_policy

    return load_policy(name)


def _fail(exc: PolicyError, as_json: bool) -> int:
    if as_json:
        _print_json({"error": exc.message, "file": exc.file, "line": exc.line, "col": exc.col,
                     "name": exc.name})
    else:
        print(f"error: {exc}", file=sys.stderr)
    return 1


def _lint(args: argparse.Namespace) -> int:
    from plguard.policy.lint import lint

    report = lint(args.policy)
    if args.json:
        _print_json({"policy": report.policy, "ok": report.ok,
                     "errors": [dataclasses.asdict(f) for f in report.errors],
                     "warnings": [dataclasses.asdict(f) for f in report.warnings]})
    else:
        for f in report.findings:
            print(f.render())
        print(f"{report.policy}: {len(report.errors)} error(s), "
              f"{len(report.warnings)} warning(s)")
    return 0 if report.ok else 1


def _explain(args: argparse.Namespace) -> int:
    from plguard.policy.explain import explain, explain_text

    try:
        policy = _load(args.policy)
    except PolicyError as exc:
        return _fail(exc, args.json)
    if args.json:
        _print_json({"policy": policy.id, "predicates": list(policy.predicates),
                     "rules": explain(policy)})
    else:
        print(explain_text(policy))
    return 0


def _cases(args: argparse.Namespace) -> int:
    from plguard.policy.cases import cases_yaml, generate_cases

    try:
        policy = _load(args.policy)
        cases = generate_cases(policy, args.query)
    except PolicyError as exc:
        return _fail(exc, args.json)
    if args.json:
        _print_json({"policy": policy.id, "cases": [c.as_case() for c in cases]})
    else:
        print(f"# minimal cases for {policy.id}: each forces its query whatever the "
              "unlisted predicates are")
        print(cases_yaml(cases), end="")
    return 0


def _diff(args: argparse.Namespace) -> int:
    from plguard.policy.diff import diff

    try:
        report = diff(_load(args.a), _load(args.b))
    except PolicyError as exc:
        return _fail(exc, args.json)
    if args.json:
        _print_json(report)
    else:
        print(report.render())
    return 1 if args.exit_code and not report.same else 0


def _test(args: argparse.Namespace) -> int:
    from plguard.policy.cases import run_cases

    try:
        policy = _load(args.policy)
    except PolicyError as exc:
        return _fail(exc, args.json)
    report = run_cases(policy)
    if args.json:
        _print_json({"policy": report.policy, "passed": report.passed, "cases": [
            {"name": r.case.name, "line": r.case.line, "passed": r.passed,
             "failures": [{"query": q, "expected": e, "actual": a} for q, e, a in r.failures]}
            for r in report.results]})
    else:
        for r in report.results:
            mark = "ok  " if r.passed else "FAIL"
            print(f"{mark} {r.case.name}")
            for q, e, a in r.failures:
                print(f"       {r.case.file}:{r.case.line}: {q}: expected {e:g}, got {a:.6g}")
        print(f"{policy.id}: {len(report.results) - report.n_failed} passed, "
              f"{report.n_failed} failed")
        if not report.results:
            print("(no cases.yaml in this bundle)")
    return 0 if report.passed else 1

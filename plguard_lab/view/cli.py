"""``plguard view``: browse a run folder or trace file in a local page, or export it.

Nothing heavy is imported until the command runs, so ``plguard --help`` works without the
server extra, and ``view`` names the install command when FastAPI or uvicorn is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from plguard.errors import ConfigError, MissingDependencyError

_INSTALL = "pip install 'plguard[server]'"


def add_view_commands(subparsers: Any) -> None:
    """Add ``plguard view`` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "view", help="Browse an eval run or guard traces in a local web page.",
        description="Serve a page on a loopback address with a table of records (filters "
        "by method, XSTest type, label, action, evaluator verdict and disagreement), a page "
        "per record (prompt, draft, final answer, repairs, predicate and rule probabilities, "
        "explanations, timings) with a what-if panel, and the run's report. With --export, "
        "write one self-contained HTML file instead (no server, no what-if).")
    p.add_argument("source", metavar="RUN_DIR|TRACE_FILE",
                   help="A run folder of `plguard eval xstest`, or a file of GuardResult "
                   "traces (JSON lines or `plguard guard --json` output).")
    p.add_argument("--port", type=int, default=8765,
                   help="TCP port (default 8765; 0 picks a free one).")
    p.add_argument("--host", default="127.0.0.1",
                   help="Address to bind (default 127.0.0.1). The viewer has no "
                   "authentication: keep it on a loopback address.")
    p.add_argument("--export", metavar="FILE.html",
                   help="Write a self-contained HTML file of the run and exit.")
    p.add_argument("--policy", metavar="NAME|PATH",
                   help="Policy bundle for explanations and what-if, instead of the one the "
                   "run names (e.g. for traces of an unbundled policy).")
    p.add_argument("--log-level", default="warning",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=_cmd_view, lab_command="plguard view")


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _free_port(host: str) -> int:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host.strip("[]"), 0))
        return int(s.getsockname()[1])


def _cmd_view(args: argparse.Namespace) -> int:
    source = Path(args.source).expanduser()
    if not source.exists():
        raise ConfigError(f"{source}: no such file or folder (give a run folder of "
                          "`plguard eval xstest` or a file of guard traces)")
    if args.export:
        from plguard_lab.view.export import export_html
        from plguard_lab.view.state import ViewState

        state = ViewState.from_source(source, args.policy)
        out = export_html(state, args.export)
        print(f"plguard: wrote {out} ({len(state.records)} records, "
              f"{len(state.problems)} problems)", file=sys.stderr)
        return 0
    try:
        import uvicorn

        from plguard_lab.view.app import LOOPBACK_HOSTS, build_view_app
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "fastapi", "plguard view", _INSTALL) from None
    from plguard_lab.view.state import ViewState

    if not _is_loopback(args.host):
        print(f"plguard: warning: serving the viewer on {args.host}: it has no "
              "authentication, and anyone who can reach this address can read the run.",
              file=sys.stderr)
    state = ViewState.from_source(source, args.policy)
    hosts = list(LOOPBACK_HOSTS) + ([] if _is_loopback(args.host) else [args.host])
    app = build_view_app(state, policy=args.policy, allowed_hosts=hosts)
    # Port 0 is resolved here rather than by uvicorn, so the address printed is the real one.
    port = args.port or _free_port(args.host)
    config = uvicorn.Config(app, host=args.host, port=port, log_level=args.log_level)
    server = uvicorn.Server(config)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"plguard: viewing {source} ({len(state.records)} records, "
          f"{len(state.problems)} problems) at http://{shown}:{port}/ (Ctrl-C stops)",
          file=sys.stderr)
    server.run()
    return 0


__all__ = ["add_view_commands"]

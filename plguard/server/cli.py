"""``plguard serve``: run the OpenAI-compatible guard server.

Nothing heavy is imported until the command runs, so ``plguard --help`` works without the
server extra and ``serve`` names the install command when FastAPI or uvicorn is missing.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from typing import Any

from plguard.config import GuardConfig, ServerConfig
from plguard.errors import MissingDependencyError

_INSTALL = "pip install 'plguard[server]'"


def _help(name: str) -> str:
    return ServerConfig.model_fields[name].description or ""


def add_serve_commands(subparsers: Any) -> None:
    """Add ``plguard serve`` to the CLI's subparsers."""
    from plguard.cli import add_config_options

    p = subparsers.add_parser(
        "serve", help="Serve an OpenAI-compatible, guarded chat API.",
        description="Serve POST /v1/chat/completions, GET /v1/models, POST /v1/guard/check, "
        "POST /v1/moderations and GET /health. Point an OpenAI client's base_url at "
        "http://HOST:PORT/v1.")
    add_config_options(p)
    p.add_argument("--host", help=_help("host"))
    p.add_argument("--port", type=int, help=_help("port"))
    p.add_argument("--upstream", metavar="URL",
                   help="server.upstream.base_url: " + _help("upstream"))
    p.add_argument("--upstream-model", metavar="NAME",
                   help="server.upstream.served_model: the model name sent upstream; "
                   "default: the name the client asked for (with --upstream-grounding: the "
                   "one model the upstream serves).")
    p.add_argument("--upstream-grounding", action="store_true", default=None,
                   help=_help("upstream_grounding"))
    p.add_argument("--model-name", metavar="NAME", help=_help("model_name"))
    p.add_argument("--api-key-env", metavar="VAR", help=_help("api_key_env"))
    p.add_argument("--max-batch-size", type=int, metavar="N", help=_help("max_batch_size"))
    p.add_argument("--max-wait-ms", type=float, metavar="MS", help=_help("max_wait_ms"))
    p.add_argument("--no-batching", action="store_true",
                   help="Serve each request in its own guard.batch call (max batch size 1).")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=_cmd_serve)


def serve_config(args: argparse.Namespace) -> GuardConfig:
    """The GuardConfig for ``serve``: the config file and --set, then the serve options."""
    from plguard.cli import config_from_args
    from plguard.server.upstream import upstream_guard_config

    # The serve options and --set are validated together: an old key given with --set
    # (server.upstream_timeout_s) needs the upstream that --upstream names, in the same
    # validation, or it configures nothing and is lost.
    overrides = {
        "server.host": args.host, "server.port": args.port,
        "server.upstream.base_url": args.upstream,
        "server.upstream.served_model": args.upstream_model,
        "server.model_name": args.model_name, "server.api_key_env": args.api_key_env,
        "server.max_batch_size": 1 if args.no_batching else args.max_batch_size,
        "server.max_wait_ms": args.max_wait_ms,
        "server.upstream_grounding": args.upstream_grounding,
    }
    return upstream_guard_config(config_from_args(args, extra=overrides))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from plguard.server.app import build_app
    except ImportError as exc:
        raise MissingDependencyError(exc.name or "fastapi", "plguard serve", _INSTALL) from None
    from plguard.guard import Guard

    cfg = serve_config(args)
    s = cfg.server
    has_key = bool(os.environ.get(s.api_key_env))
    if not _is_loopback(s.host) and not has_key:
        print(f"plguard: warning: serving on {s.host} without an API key; anyone who can "
              f"reach this address can use the model. Set {s.api_key_env} to require one.",
              file=sys.stderr)
    guard = Guard(cfg)
    app = build_app(guard, s)
    drafts = f"upstream {s.upstream.base_url}" if s.upstream else "the local generator"
    grounds = "upstream" if s.upstream_grounding else guard.grounder_backend.model_id
    print(f"plguard: serving model '{s.model_name}' at http://{s.host}:{s.port}/v1 "
          f"(policy {guard.policy.id}, drafts from {drafts}, grounding on {grounds}, "
          f"API key {'required' if has_key else 'not required'})", file=sys.stderr)
    uvicorn.run(app, host=s.host, port=s.port, log_level=args.log_level)
    return 0

"""``plguard batch INPUT OUTPUT [--ray [ADDRESS]]`` and the Ray options shared with eval."""

from __future__ import annotations

import argparse
from typing import Any

from plguard.cli import positive_int
from plguard.scale import RayOptions


def add_ray_options(p: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]``, ``--workers``, ``--cpus-per-worker``, ``--gpus-per-worker``."""
    g = p.add_argument_group("Ray scale-out")
    g.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="Run on Ray: alone, a local Ray instance (or the cluster in "
                   "RAY_ADDRESS); with ADDRESS, that cluster (host:6379, auto or "
                   "ray://host:10001).")
    g.add_argument("--workers", type=positive_int, help="Ray actors, one model load each "
                   "(default: generator.data_parallel_size when above 1, else one per "
                   "GPU group or per --cpus-per-worker CPUs).")
    g.add_argument("--cpus-per-worker", type=float, default=1.0,
                   help="CPUs reserved per actor (default 1; also its torch threads).")
    g.add_argument("--gpus-per-worker", type=float, help="GPUs per actor (default: "
                   "generator.tensor_parallel_size on a cluster with GPUs, else 0).")


def ray_options(args: argparse.Namespace) -> RayOptions | None:
    """The RayOptions the flags ask for, or None for a local run."""
    if getattr(args, "ray", None) is None:
        for flag in ("workers", "gpus_per_worker"):
            if getattr(args, flag, None) is not None:
                from plguard.errors import ConfigError

                raise ConfigError(f"--{flag.replace('_', '-')} needs --ray")
        return None
    return RayOptions(address=None if args.ray == "local" else args.ray,
                      workers=args.workers, cpus_per_worker=args.cpus_per_worker,
                      gpus_per_worker=args.gpus_per_worker)


def _cmd_batch(args: argparse.Namespace) -> int:
    from plguard.batchjob.job import run_batch
    from plguard.cli import config_from_args

    summary = run_batch(config_from_args(args), args.input, args.output,
                        prompt_column=args.prompt_column,
                        response_column=args.response_column, id_column=args.id_column,
                        ray=ray_options(args), limit=args.limit,
                        progress=not args.no_progress)
    actions = ", ".join(f"{k} {v}" for k, v in sorted(summary.actions.items())) or "-"
    print(f"{summary.output}: {summary.rows} rows, {summary.written} written, "
          f"{summary.skipped} already done, {summary.retried} retried after an error, "
          f"{summary.errors} errors; actions: {actions}")
    return 1 if summary.errors else 0


def add_batch_commands(subparsers: Any) -> None:
    """Add ``plguard batch``."""
    from plguard.cli import add_config_options

    p = subparsers.add_parser(
        "batch", help="Guard a dataset (JSONL, CSV or Parquet) into traces (JSONL or "
        "Parquet); resumable, optionally on Ray.",
        description="Rows with a response are checked; rows without one get a draft from "
        "the generator first. A rerun skips the rows already in OUTPUT and retries those "
        "written with an error.")
    p.add_argument("input", metavar="INPUT", help="Dataset: .jsonl, .ndjson, .csv or .parquet.")
    p.add_argument("output", metavar="OUTPUT", help="Traces: .jsonl or .parquet.")
    p.add_argument("--prompt-column", default="prompt",
                   help="Column with the request: text or a list of messages (default prompt).")
    p.add_argument("--response-column", help="Column with responses to check (default: "
                   "'response' when present; empty cells are drafted).")
    p.add_argument("--id-column", help="Column with unique row ids (default: 'id' when "
                   "present, else the row number).")
    p.add_argument("--limit", type=positive_int, help="Only the first N rows.")
    p.add_argument("--no-progress", action="store_true", help="No progress bar.")
    add_config_options(p)
    add_ray_options(p)
    p.set_defaults(func=_cmd_batch)


__all__ = ["add_batch_commands", "add_ray_options", "ray_options"]

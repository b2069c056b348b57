"""Scale-out on Ray: shards of work through Ray Data ``map_batches`` over an actor pool.

The unit of work is a *shard*: a JSON payload (a few rows, typically one model batch)
that a worker turns into a list of JSON records. The caller cuts the shards, so the same
rows meet in the same model batch locally and on Ray, and the outputs agree.

Each actor builds its worker once (one Guard, one model load) from a factory named
``"module:function"``, called with the run's config. Ray Data restarts an actor that dies and
retries its shard (``max_restarts``/``max_task_retries`` default to -1 for actor pools),
and a shard's records reach the driver only once the shard is done, so the driver, which
alone writes the output, sees every shard exactly once or not at all: no duplicate and
no loss. ``ray`` is imported only here, and only when a run asks for it.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from plguard.config import GuardConfig
from plguard.errors import BackendError, ConfigError, MissingDependencyError

INSTALL = "pip install 'plguard[ray]'"
# Environment forwarded to the actors: where the embedded model is cached, etc.
_FORWARD_ENV_PREFIXES = ("PLGUARD_", "HF_", "OMP_NUM_THREADS")

Worker = Callable[[Any], list[dict[str, Any]]]


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide a Ray run goes.

    ``address`` None starts (or joins, via ``RAY_ADDRESS``) a local Ray instance;
    ``workers`` None means one per ``cpus_per_worker`` CPUs (or GPU group) of the cluster.
    """

    address: str | None = None
    workers: int | None = None
    cpus_per_worker: float = 1.0
    gpus_per_worker: float | None = None


def import_ray() -> Any:
    """The ``ray`` module, or a clear install hint."""
    try:
        import ray
        import ray.data  # noqa: F401  (Ray Data ships in the same wheel)
    except ImportError as exc:
        raise MissingDependencyError("ray", "--ray", INSTALL) from exc
    return ray


def connect(address: str | None) -> Any:
    """Join the Ray cluster at ``address`` (None: local), once per process."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARD_ENV_PREFIXES)}
    # Ray's and Ray Data's INFO lines would bury plguard's own progress bar and summary.
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 include_dashboard=False, logging_level=logging.WARNING,
                 runtime_env={"env_vars": env} if env else None)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "a new local instance"
        raise BackendError(f"cannot connect to the Ray cluster at {where}: "
                           f"{type(exc).__name__}: {exc}") from None
    return ray


def worker_config(config: GuardConfig) -> GuardConfig:
    """The config one actor runs: one data-parallel replica of the generator.

    Data parallelism on Ray *is* the actor pool; each actor's vLLM engine is one replica
    (tensor-parallel over ``tensor_parallel_size`` devices).
    """
    data = config.model_dump()
    for role in ("generator", "grounder", "evaluator"):
        if data.get(role):
            data[role]["data_parallel_size"] = 1
    return GuardConfig.model_validate(data)


def plan(config: GuardConfig, opts: RayOptions, resources: dict[str, float]
         ) -> tuple[int, float, float]:
    """(actors, CPUs per actor, GPUs per actor) for this config on a cluster's resources."""
    gen = config.generator
    gpus_total = float(resources.get("GPU", 0.0))
    gpus = opts.gpus_per_worker
    if gpus is None:
        gpus = float(gen.tensor_parallel_size) if gpus_total > 0 and gen.device != "cpu" else 0.0
    if gpus > gpus_total:
        raise ConfigError(f"each Ray worker needs {gpus:g} GPU(s) (tensor_parallel_size) but "
                          f"the cluster has {gpus_total:g}")
    cpus = float(opts.cpus_per_worker)
    if opts.workers is not None:
        workers = opts.workers
    elif gen.data_parallel_size > 1:
        workers = gen.data_parallel_size
    elif gpus > 0:
        workers = max(1, math.floor(gpus_total / gpus))
    else:
        workers = max(1, math.floor(float(resources.get("CPU", 1.0)) / max(cpus, 1e-9)))
    return workers, cpus, gpus


class ShardActor:
    """A Ray Data callable class: builds its worker once, then maps shard payloads."""

    def __init__(self, factory: str, config: dict[str, Any]) -> None:
        self.worker: Worker = build_worker(factory, GuardConfig.model_validate(config))

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        """Records (as JSON text) of every shard in a Ray Data batch."""
        return {"result": [json.dumps(self.worker(json.loads(str(p))), ensure_ascii=False)
                           for p in batch["payload"]]}


def build_worker(factory: str, config: GuardConfig) -> Worker:
    """``module:function(config)``: the per-process worker of a factory."""
    mod, _, name = factory.partition(":")
    fn = getattr(importlib.import_module(mod), name)
    return fn(config)


def run_shards_local(factory: str, config: GuardConfig, payloads: Sequence[Any]
                     ) -> Iterator[list[dict[str, Any]]]:
    """The same workers in this process, shard by shard (the reference for Ray runs)."""
    worker = build_worker(factory, config)
    for p in payloads:
        yield worker(json.loads(json.dumps(p)))


def run_shards_ray(factory: str, config: GuardConfig, payloads: Sequence[Any],
                   opts: RayOptions) -> Iterator[list[dict[str, Any]]]:
    """Every shard through an actor pool; yields each shard's records as it finishes.

    Order is not preserved: results stream back as soon as any actor finishes a shard.
    """
    if not payloads:
        return
    if opts.address is None:
        # On a local Ray instance the actors see this machine's files: a bad model path
        # fails here, plainly, rather than as an actor dying in Ray's logs.
        from plguard.models import resolve_model_path

        for path in {config.generator.path, config.grounder_model.path,
                     config.evaluator_model.path}:
            resolve_model_path(path)
    ray = connect(opts.address)
    workers, cpus, gpus = plan(config, opts, dict(ray.cluster_resources()))
    workers = min(workers, len(payloads))
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # the caller draws one bar over records
    ctx.execution_options.preserve_order = False
    items = [{"payload": json.dumps(p, ensure_ascii=False)} for p in payloads]
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    kwargs: dict[str, Any] = {"num_cpus": cpus}
    if gpus > 0:
        kwargs["num_gpus"] = gpus
    ds = ds.map_batches(
        ShardActor, batch_size=1, compute=ray.data.ActorPoolStrategy(size=workers),
        fn_constructor_kwargs={"factory": factory,
                               "config": worker_config(config).model_dump(mode="json")},
        **kwargs)
    try:
        for row in ds.iter_rows():
            yield list(json.loads(row["result"]))
    except Exception as exc:
        raise BackendError(f"Ray run failed: {_root_cause(exc)} (worker logs: "
                           "/tmp/ray/session_latest/logs on the worker's node)") from exc


def _root_cause(exc: BaseException) -> str:
    """The worker's own error inside Ray's wrappers (its type and message, one line)."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and all(e is not c for c in chain):
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        cause = getattr(e, "cause", None)  # RayTaskError keeps the original exception
        if isinstance(cause, BaseException):
            return f"{type(cause).__name__}: {cause}"
    for e in chain:
        # An actor that died in its constructor carries the remote traceback as text.
        lines = [ln.strip() for ln in str(e).splitlines()]
        found = [m.group(1) for ln in lines
                 if (m := re.match(r"^(?:[\w]+\.)*(\w+(?:Error|Exception): .+)$", ln))]
        if found:
            return found[-1]
    return f"{type(exc).__name__}: {exc}"


__all__ = ["RayOptions", "ShardActor", "build_worker", "connect", "import_ray", "plan",
           "run_shards_local", "run_shards_ray", "worker_config"]

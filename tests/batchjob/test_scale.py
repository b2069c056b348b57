"""Sizing the Ray actor pool and reading worker errors (no cluster needed)."""

from __future__ import annotations

import pytest

from plguard.config import GuardConfig
from plguard.errors import ConfigError
from plguard.scale import RayOptions, _root_cause, plan, worker_config


def cfg(**gen):
    return GuardConfig.from_dict({"generator": {"path": "embedded", **gen}})


def test_cpu_cluster_gets_one_actor_per_cpus_per_worker():
    assert plan(cfg(), RayOptions(), {"CPU": 4.0}) == (4, 1.0, 0.0)
    assert plan(cfg(), RayOptions(cpus_per_worker=2), {"CPU": 5.0}) == (2, 2.0, 0.0)
    assert plan(cfg(), RayOptions(workers=3), {"CPU": 1.0}) == (3, 1.0, 0.0)


def test_gpu_cluster_gets_one_actor_per_tensor_parallel_group():
    c = cfg(backend="vllm", tensor_parallel_size=2)
    assert plan(c, RayOptions(), {"CPU": 64.0, "GPU": 8.0}) == (4, 1.0, 2.0)
    # data_parallel_size names the replica count; each replica is one actor
    c4 = cfg(backend="vllm", tensor_parallel_size=2, data_parallel_size=3)
    assert plan(c4, RayOptions(), {"CPU": 64.0, "GPU": 8.0}) == (3, 1.0, 2.0)
    # a CPU model on a GPU cluster asks for no GPU
    assert plan(cfg(device="cpu"), RayOptions(), {"CPU": 2.0, "GPU": 8.0})[2] == 0.0
    with pytest.raises(ConfigError, match="needs 4 GPU"):
        plan(cfg(tensor_parallel_size=4), RayOptions(), {"CPU": 8.0, "GPU": 2.0})


def test_each_actor_runs_one_replica():
    c = GuardConfig.from_dict({"generator": {"data_parallel_size": 4},
                               "evaluator": {"path": "x", "data_parallel_size": 2}})
    w = worker_config(c)
    assert w.generator.data_parallel_size == 1 and w.evaluator is not None
    assert w.evaluator.data_parallel_size == 1 and w.grounder is None


def test_root_cause_finds_the_worker_error_in_ray_wrappers():
    class ActorDiedError(Exception):
        pass

    remote = ("The actor died because of an error raised in its creation task\n"
              "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
              "plguard.errors.ModelError: model not found: /m")
    try:
        try:
            raise ActorDiedError(remote)
        except ActorDiedError as inner:
            raise RuntimeError("") from inner
    except RuntimeError as outer:
        assert _root_cause(outer) == "ModelError: model not found: /m"

    class RayTaskError(Exception):
        def __init__(self, cause):
            super().__init__("wrapped")
            self.cause = cause

    assert _root_cause(RayTaskError(ValueError("bad row"))) == "ValueError: bad row"

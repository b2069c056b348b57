"""Every shipped run config loads (unknown keys raise) and says what it claims."""

from __future__ import annotations

from pathlib import Path

import pytest

from plguard.config import GuardConfig

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_configs_exist():
    names = {p.name for p in CONFIGS.glob("*.yaml")}
    assert {"cpu_default.yaml", "paper_phi3_gpu.yaml"} <= names


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_loads(path):
    cfg = GuardConfig.from_yaml(path)
    assert cfg.generator.backend in ("transformers", "vllm")


def test_cpu_default_is_the_defaults():
    cfg = GuardConfig.from_yaml(CONFIGS / "cpu_default.yaml")
    assert cfg == GuardConfig()
    assert cfg.generator.path == "embedded"
    assert cfg.generator.backend == "transformers"
    assert cfg.grounder_model is cfg.generator


def test_paper_phi3_gpu():
    cfg = GuardConfig.from_yaml(CONFIGS / "paper_phi3_gpu.yaml")
    phi3 = "microsoft/Phi-3-medium-4k-instruct"
    assert cfg.generator.path == phi3 and cfg.grounder_model.path == phi3
    assert cfg.grounder_model == cfg.generator  # equal configs: one engine for both roles
    assert cfg.generator.backend == "vllm" and cfg.generator.dtype == "bfloat16"
    assert cfg.generation.temperature == 0.0 and cfg.generation.max_new_tokens == 512
    assert cfg.policy == "detailed"
    ev = cfg.evaluator_model
    assert ev.path.startswith("Qwen/") and "Instruct" in ev.path and ev.backend == "vllm"
    assert cfg.eval.evaluator_batch_size == 8
    assert cfg.eval.evaluator_max_new_tokens == 192
    # Both engines share one GPU during evals.
    assert cfg.generator.gpu_memory_utilization + ev.gpu_memory_utilization < 1


def test_generation_params_defaults_are_the_config_defaults():
    # One place holds each decoding default: the record backends take agrees with config.
    from plguard.config import GenerationConfig
    from plguard.types import GenerationParams

    cfg, params = GenerationConfig(), GenerationParams()
    assert (params.max_new_tokens, params.temperature) == (cfg.max_new_tokens, cfg.temperature)


def test_heads_off_from_yaml_or_set_means_no_heads(capsys):
    from plguard.cli import main

    # YAML reads a bare `off` as False: it must mean "no heads", not a type error.
    assert GuardConfig.from_dict({"grounding": {"heads": False}}).grounding.heads is None
    assert main(["config", "--json", "--set", "grounding.heads=off"]) == 0
    assert '"heads": null' in capsys.readouterr().out

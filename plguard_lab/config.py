"""The laboratory's settings: the ``eval:`` section of a plguard config.

Guarding never reads them, so the product keeps the section as it was given
(``GuardConfig.eval``, a mapping) and the laboratory defines and checks it here, when a
study starts. Config files, ``--set eval.*`` and the manifests of earlier runs keep their
keys: :func:`lab_dump` writes the section in full, defaults included, as runs always have,
so a run started before the move resumes under the same recorded values.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from plguard.config import GuardConfig
from plguard.errors import ConfigError


class EvalConfig(BaseModel):
    """Offline evaluation settings (``eval:`` of a plguard config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    evaluator_batch_size: int = Field(8, ge=1, description="Semantic evaluator batch.")
    evaluator_max_new_tokens: int = Field(192, ge=1, description="Semantic evaluator tokens.")
    evaluator_structured: bool = Field(True, description="Constrain the semantic evaluator's "
                                       "output to its JSON schema where the backend supports "
                                       "structured outputs (vLLM, transformers, openai "
                                       "servers that accept response_format).")
    judge_max_new_tokens: int = Field(192, ge=1, description="LLM-as-a-judge verdict tokens.")
    judge_structured: bool = Field(True, description="Constrain the LLM judge's output to "
                                   "its JSON schema where the backend supports structured "
                                   "outputs (vLLM, transformers, openai servers that accept "
                                   "response_format), so its verdicts are not lost to parse "
                                   "failures.")
    bootstrap: int = Field(1000, ge=10, description="Bootstrap resamples for 95% intervals.")
    seed: int = Field(0, description="Seed for bootstraps and sampling.")


def eval_settings(config: GuardConfig) -> EvalConfig:
    """``config.eval`` checked: a ConfigError names each bad ``eval.<key>``."""
    try:
        return EvalConfig.model_validate(dict(config.eval or {}))
    except ValidationError as exc:
        problems = "; ".join(
            f"eval.{'.'.join(map(str, e['loc']))}: "
            + ("not a setting of the eval section (known: "
               + ", ".join(EvalConfig.model_fields) + ")"
               if e["type"] == "extra_forbidden" else e["msg"])
            for e in exc.errors())
        raise ConfigError(f"config: {problems}") from None


def lab_dump(config: GuardConfig) -> dict[str, Any]:
    """``config`` as JSON for a run's manifest, with the eval section in full."""
    return {**config.model_dump(mode="json"),
            "eval": eval_settings(config).model_dump(mode="json")}


__all__ = ["EvalConfig", "eval_settings", "lab_dump"]

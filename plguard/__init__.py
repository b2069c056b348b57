"""plguard: a probabilistic-logic guardrail for local LLMs (PL-Guard).

``import plguard`` imports neither torch nor vllm: backends load lazily by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plguard.config import GuardConfig, ModelConfig, Thresholds
from plguard.decide import decide
from plguard.errors import (
    BackendDeadError,
    BackendError,
    ConfigError,
    InputError,
    MissingDependencyError,
    ModelError,
    PlguardError,
    PolicyError,
)
from plguard.guard import Guard
from plguard.types import (
    Decision,
    Grounding,
    GuardResult,
    Message,
    PolicyResult,
    PredicateScore,
    PredicateSpec,
    RepairRound,
)

if TYPE_CHECKING:
    from plguard.moderation import Moderation
    from plguard.policy import Policy, load_policy

__version__ = "0.1.0"

_LAZY = {"Policy": "plguard.policy", "load_policy": "plguard.policy",
         "Moderation": "plguard.moderation"}


def __getattr__(name: str) -> Any:
    # ProbLog is imported only when a policy is first needed.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'plguard' has no attribute {name!r}")


__all__ = [
    "BackendDeadError",
    "BackendError",
    "ConfigError",
    "Decision",
    "Grounding",
    "Guard",
    "GuardConfig",
    "GuardResult",
    "InputError",
    "Message",
    "MissingDependencyError",
    "ModelConfig",
    "ModelError",
    "Moderation",
    "PlguardError",
    "Policy",
    "PolicyError",
    "PolicyResult",
    "PredicateScore",
    "PredicateSpec",
    "RepairRound",
    "Thresholds",
    "__version__",
    "decide",
    "load_policy",
]

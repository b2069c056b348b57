"""The heads and calibration a Grounder applies, resolved and checked before it is built.

With ``grounding.calibration`` set, each predicate's combined P(True) is mapped through
its fitted Platt scaling (:func:`plguard.grounding.combine.calibrate`), the raw log-probs
staying in the trace; ``grounding.heads`` names learned heads over hidden states
(``auto``: the shipped ones where they apply, with their own dev-fitted calibration).
Every file is checked against the backend's weights, the template and the questions here,
once, so grounding itself never reads a file.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plguard.backends.base import Backend
from plguard.calibration import Calibration, check_applies, check_heads_match
from plguard.calibration import load_calibration as load_calibration_file
from plguard.config import GroundingConfig
from plguard.errors import ConfigError, InputError
from plguard.grounding.alone import ALONE_VERSION
from plguard.grounding.prompt import (
    ANSWER_WORDS,
    question_block,
    question_digest,
    template_version,
)
from plguard.heads.apply import check_heads, main_question_digest, resolve_heads
from plguard.heads.artefact import HeadsFile, shipped_calibration
from plguard.types import PredicateSpec


@dataclass(frozen=True, slots=True)
class Resolved:
    """The heads file and calibration file a Grounder applies (None: not applied)."""

    heads: HeadsFile | None = None
    calibration: Calibration | None = None

    @property
    def platt(self) -> Mapping[str, tuple[float, float]]:
        """Predicate name -> Platt ``(a, b)`` of the calibration (empty without one)."""
        return dict(self.calibration.predicates) if self.calibration else {}


def resolve(backend: Backend, predicates: Sequence[PredicateSpec], cfg: GroundingConfig,
            policy_name: str | None = None) -> Resolved:
    """The heads and calibration ``cfg`` names for this backend, policy and predicates.

    A named file that does not apply raises :class:`~plguard.errors.ConfigError`; heads
    ``auto`` that do not apply fall back to zero-shot with a warning.
    """
    check_predicates(predicates)
    # The identity may hash the weights: asked for only when a file is to be checked.
    identity = functools.cache(lambda: backend_identity(backend))
    tv = template_version(cfg)
    cal = (_calibration(cfg.calibration, identity(), tv, predicates, cfg, policy_name)
           if cfg.calibration else None)
    heads: HeadsFile | None = resolve_heads(cfg.heads, backend, policy_name)
    if heads is not None:
        answers = ANSWER_WORDS[cfg.answer_words]
        try:
            check_heads(heads, backend, identity(), tv, policy_name,
                        {p.name: main_question_digest(
                            question_block(p, p.question, answers, cfg.examples))
                         for p in predicates},
                        [p.name for p in predicates if p.scope == "request"],
                        alone_version=ALONE_VERSION)
        except ConfigError as exc:
            if cfg.heads != "auto":
                raise
            # 'auto' means "the shipped heads where they apply": grounding settings they
            # were not fitted with (no worked examples, Yes/No words) read zero-shot.
            warnings.warn(f"grounding.heads auto: the shipped heads do not apply here, "
                          f"so grounding is zero-shot ({exc})", UserWarning, stacklevel=3)
            heads = None
    shipped = (shipped_calibration(policy_name) if heads is not None
               and cfg.heads == "auto" and not cfg.calibration else None)
    if shipped is not None:  # the shipped heads' own thresholds, fitted on dev
        cal = _calibration(str(shipped), identity(), tv, predicates, cfg, policy_name)
    if cal is not None:
        check_heads_match(cal, heads.digest if heads else None, heads.label if heads else "")
    return Resolved(heads=heads, calibration=cal)


def check_predicates(predicates: Sequence[PredicateSpec]) -> None:
    """Refuse duplicate predicate names and scopes other than request and response."""
    names = [p.name for p in predicates]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(f"duplicate predicate names: {', '.join(dupes)}")
    for p in predicates:
        if p.scope not in ("request", "response"):
            raise InputError(f"predicate '{p.name}' has scope {p.scope!r}; "
                             "use 'request' or 'response'")


def _calibration(path: str, identity: Mapping[str, Any], tv: str,
                 predicates: Sequence[PredicateSpec], cfg: GroundingConfig,
                 policy_name: str | None) -> Calibration:
    cal = load_calibration_file(path)
    check_applies(cal, **identity, template_version=tv, policy_name=policy_name,
                  question_digests={p.name: question_digest(p, cfg) for p in predicates})
    return cal


def load_calibration(path: str | Path) -> dict[str, tuple[float, float]]:
    """Predicate name -> Platt ``(a, b)`` of a calibration file (no model check)."""
    return dict(load_calibration_file(path).predicates)


def backend_identity(backend: Backend) -> dict[str, Any]:
    """The model id and content hash of a backend's weights (hash None when unknown)."""
    sha = None
    local = getattr(backend, "local_path", None)
    if local:
        from plguard.models import model_source

        try:
            sha = model_source(str(local)).get("sha256")
        except Exception:  # a folder without weight files: identify by id alone
            sha = None
    return {"model_sha256": sha, "model_id": str(backend.model_id)}


__all__ = ["Resolved", "backend_identity", "check_predicates", "load_calibration", "resolve"]

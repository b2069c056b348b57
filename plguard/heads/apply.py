"""Which heads file applies in the Grounder, and whether it fits the loaded model.

Imports neither torch nor the grounding module (the Grounder imports this), so a heads
file costs nothing to load beside numpy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from plguard.backends.base import capabilities_of
from plguard.heads.artefact import HeadsFile, check_applies, load_heads, shipped_heads

EMBEDDED_ID = "embedded:smollm2-135m-instruct"


def resolve_heads(setting: str | None, backend: Any, policy_name: str | None
                  ) -> HeadsFile | None:
    """The heads file a ``grounding.heads`` setting names for this backend and policy.

    ``auto`` is the file shipped for the embedded model and this policy where there is one
    and the backend declares hidden states (``capabilities``), else none (zero-shot
    grounding, as before); a named file is refused with a clear error wherever it does
    not apply.
    """
    if setting is None or setting == "off":
        return None
    if setting == "auto":
        bare = str(backend.model_id).rsplit(":", 1)[0]
        if (policy_name is None or bare != EMBEDDED_ID
                or not capabilities_of(backend).hidden_states):
            return None
        path = shipped_heads(policy_name)
        return None if path is None else load_heads(path)
    return load_heads(setting)


def check_heads(hf: HeadsFile, backend: Any, identity: Mapping[str, Any],
                template_version: str, policy_name: str | None,
                digests: Mapping[str, str],
                request_predicates: Sequence[str] | None = None,
                alone_version: str | None = None) -> None:
    """:func:`check_applies` with what the Grounder knows of its backend."""
    width = None
    model = getattr(backend, "model", None)
    if model is not None and getattr(model, "config", None) is not None:
        width = getattr(model.config, "hidden_size", None)
    check_applies(hf, model_sha256=identity.get("model_sha256"),
                  model_id=str(identity.get("model_id")), template_version=template_version,
                  policy_name=policy_name, question_digests=digests,
                  hidden_states=capabilities_of(backend).hidden_states, width=width,
                  request_predicates=request_predicates, alone_version=alone_version)


def main_question_digest(block: str) -> str:
    """sha256 of a predicate's main question block: what a question-readout head reads."""
    return hashlib.sha256(block.encode()).hexdigest()


__all__ = ["EMBEDDED_ID", "check_heads", "main_question_digest", "resolve_heads"]

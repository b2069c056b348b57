"""Calibration files: per-predicate Platt scaling and fitted thresholds, for one model.

A grounding model's raw P(True) is rarely a probability (a 1.5B model's sits near 0.5 for
plain cases), and rules multiply them. A calibration maps each predicate's raw P(True)
through ``sigmoid(a * logit(p) + b)`` fitted on labelled data, and may carry the two
decision thresholds fitted on the same data.

It is a property of (model weights, grounding template, policy bundle): the file records
all three and :func:`load_calibration` refuses to apply it to anything else, because the
same numbers on another model would be silently wrong. Files are written by
``plguard calibrate`` (:mod:`plguard_lab.studies.quality.fit`). Legacy (format 1) files, whose
writer was removed, still load, with a warning: they name only the model.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plguard.errors import ConfigError

FORMAT = "plguard-calibration/2"
LEGACY_FORMAT = "plguard-calibration/1"


@dataclass(frozen=True, slots=True)
class Calibration:
    """A loaded calibration file."""

    path: str
    digest: str  # sha256 of the file's bytes, first 12 hex digits: names it in traces
    predicates: Mapping[str, tuple[float, float]]
    model_sha256: str | None = None
    model_id: str | None = None
    template_version: str | None = None
    policy_id: str | None = None
    thresholds: Mapping[str, float | None] = field(default_factory=dict)  # None: off
    question_digests: Mapping[str, str] = field(default_factory=dict)
    legacy: bool = False
    heads_sha256: str | None = None  # thresholds fitted for this heads file's scores
    # Platt maps applied by moderation alone (a request judged with no answer), to the
    # zero-shot P of categories a heads file leaves to their questions: fitted on texts
    # judged alone, they are not the pair decisions' calibration (``predicates``).
    moderation: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How traces and manifests name this calibration."""
        return f"{Path(self.path).name}@{self.digest}"


def platt(p: float, a: float, b: float) -> float:
    """Platt scaling on the logit scale: ``sigmoid(a * logit(p) + b)``."""
    q = min(max(p, 1e-12), 1 - 1e-12)
    z = a * (math.log(q) - math.log1p(-q)) + b
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def read_json_file(path: Path, setting: str) -> tuple[bytes, Any]:
    """The bytes and parsed JSON of a file a config ``setting`` names; clear errors.

    Calibration and heads files are both read this way: their digests name the bytes.
    """
    try:
        raw = path.read_bytes()
        return raw, json.loads(raw)
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{setting}: {path} is not JSON: {exc}") from None


def load_calibration(path: str | Path) -> Calibration:
    """Read and check a calibration file (not yet its fit to a model: :func:`check_applies`)."""
    p = Path(path)
    raw, data = read_json_file(p, "grounding.calibration")
    preds = data.get("predicates") if isinstance(data, Mapping) else None
    if not isinstance(preds, Mapping):
        raise ConfigError(f"grounding.calibration: {p} has no 'predicates' mapping; write it "
                          "with `plguard calibrate`")
    digests: dict[str, str] = {}
    params = _maps(p, preds, "predicates", digests)
    mod = data.get("moderation_predicates") or {}
    if not isinstance(mod, Mapping):
        raise ConfigError(f"grounding.calibration: {p}: 'moderation_predicates' must be a "
                          "mapping of predicate -> {a, b}")
    moderation = _maps(p, mod, "moderation_predicates", digests)
    fmt = data.get("format", LEGACY_FORMAT)
    model = data.get("model")
    model = model if isinstance(model, Mapping) else {"model_id": model}
    thresholds: dict[str, float | None] = {}
    for k, v in (data.get("thresholds") or {}).items():
        if k in ("unsafe", "over_refusal", "moderation", "content") \
                and isinstance(v, int | float) and 0 <= v <= 1:
            thresholds[k] = float(v)
        elif k == "over_refusal" and v is None:  # fitted "off": never rewrite
            thresholds[k] = None
    cal = Calibration(
        path=str(p), digest=hashlib.sha256(raw).hexdigest()[:12], predicates=params,
        model_sha256=model.get("sha256"), model_id=model.get("model_id"),
        template_version=data.get("template_version"),
        policy_id=data.get("policy") if isinstance(data.get("policy"), str) else None,
        thresholds=thresholds, question_digests=digests, legacy=fmt != FORMAT,
        heads_sha256=_heads_sha256(data.get("heads")), moderation=moderation)
    if cal.legacy:
        warnings.warn(f"grounding.calibration: {p} is a legacy calibration file (format "
                      f"{fmt!r}): it is checked against the model only, not the grounding "
                      "template, policy or questions it was fitted with; refit it with "
                      "`plguard calibrate`", UserWarning, stacklevel=2)
    return cal


def _maps(path: Path, entries: Mapping[str, Any], key: str, digests: dict[str, str]
          ) -> dict[str, tuple[float, float]]:
    """Predicate -> Platt ``(a, b)`` of one mapping of the file; its question digests."""
    params: dict[str, tuple[float, float]] = {}
    for name, v in entries.items():
        try:
            a, b = float(v["a"]), float(v["b"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"grounding.calibration: {path}: {key}: predicate {name!r} "
                              "needs numeric 'a' and 'b'") from None
        if not (math.isfinite(a) and math.isfinite(b)):
            raise ConfigError(f"grounding.calibration: {path}: {key}: predicate {name!r} has "
                              "a non-finite parameter")
        params[str(name)] = (a, b)
        if isinstance(v.get("question_sha256"), str):
            digests[str(name)] = v["question_sha256"]
    return params


def check_applies(cal: Calibration, *, model_sha256: str | None, model_id: str,
                  template_version: str, policy_name: str | None,
                  question_digests: Mapping[str, str]) -> None:
    """Refuse a calibration fitted for another model, grounding template or policy.

    The model is compared by content hash where both sides have one, else by model id
    (its path part: the same weights in another dtype or backend are the same model).
    Each calibrated predicate must be asked the same way (``question_digests``: the hash of
    its question, paraphrases and examples) as when it was fitted. A legacy (format 1)
    file names only the model and is checked on that alone.
    """
    where = f"grounding.calibration: {cal.path}"
    if cal.model_sha256 and model_sha256:
        if cal.model_sha256 != model_sha256:
            raise ConfigError(f"{where} was fitted for another model (sha256 "
                              f"{cal.model_sha256[:12]}..., this one {model_sha256[:12]}...); "
                              "fit one for this model with `plguard calibrate`")
    elif cal.model_id and _bare(cal.model_id) != _bare(model_id):
        raise ConfigError(f"{where} was fitted for model '{cal.model_id}', not "
                          f"'{model_id}'; fit one for this model with `plguard calibrate`")
    if cal.legacy:
        return
    if cal.template_version != template_version:
        raise ConfigError(f"{where} was fitted with grounding template "
                          f"{cal.template_version!r}, this run uses {template_version!r} "
                          "(answer words or prompt text differ); refit it")
    if policy_name and cal.policy_id and _policy_name(cal.policy_id) != policy_name:
        raise ConfigError(f"{where} was fitted for policy {_policy_name(cal.policy_id)}, this "
                          f"run uses {policy_name}; use or fit the file for this policy")
    changed = sorted(n for n, d in cal.question_digests.items()
                     if n in question_digests and question_digests[n] != d)
    if changed:
        raise ConfigError(f"{where}: the question of {', '.join(changed[:4])} changed since "
                          "the calibration was fitted; refit it")


def check_heads_match(cal: Calibration, heads_digest: str | None, heads_label: str) -> None:
    """Refuse a calibration fitted beside one heads file when another (or none) is used.

    Its thresholds were fitted on that file's scores; on other scores they mean nothing.
    ``heads_digest``: the first 12 hex digits of the heads file in use (None: no heads).
    """
    if cal.heads_sha256 is None:
        return
    if heads_digest is None or not cal.heads_sha256.startswith(heads_digest):
        used = f"heads {heads_label}" if heads_digest else "no heads file"
        raise ConfigError(f"grounding.calibration: {cal.path} was fitted for the heads file "
                          f"with sha256 {cal.heads_sha256[:12]}..., this run uses {used}; "
                          "set grounding.heads to that file, or fit thresholds for yours "
                          "with `plguard eval quality fit-heads`")


def heads_calibration_header(policy_id: str, identity: Mapping[str, Any],
                             template_version: str, heads_path: str | Path) -> dict[str, Any]:
    """The fields every calibration fitted for a heads file starts with.

    ``heads.sha256`` is what :func:`check_heads_match` compares with the heads in use.
    """
    from plguard.records.store import now_iso

    heads = Path(heads_path)
    return {"format": FORMAT, "created": now_iso(), "policy": policy_id,
            "model": {"model_id": identity.get("model_id"),
                      "sha256": identity.get("model_sha256")},
            "template_version": template_version,
            "heads": {"file": heads.name,
                      "sha256": hashlib.sha256(heads.read_bytes()).hexdigest()}}


def _heads_sha256(v: Any) -> str | None:
    return str(v["sha256"]) if isinstance(v, Mapping) and isinstance(v.get("sha256"), str) \
        else None


def _bare(model_id: str) -> str:
    # "path:dtype[:backend]": the same weights in another dtype or backend are the same model.
    return model_id.split(":")[0]


def _policy_name(policy_id: str) -> str:
    return policy_id.split("@")[0]


__all__ = ["FORMAT", "Calibration", "check_applies", "check_heads_match",
           "heads_calibration_header", "load_calibration",
           "platt", "read_json_file"]

"""Heads files: learned per-predicate linear heads over the grounding model's hidden state.

Like a calibration file, a heads file belongs to one (model weights, grounding template,
policy bundle, question wording): it records all four and :func:`check_applies` refuses
it for anything else, because the same weights over another model's states are noise.

Each predicate's head reads one layer's state at one position (``readout``): ``question``,
the answer position after the predicate's own question (the zero-shot reading's
position), ``prefix``, the end of the data block with no question (one forward serves
every such predicate of a scope), or, for request predicates, ``pair_prefix``: the end of
the request block inside the pair's prompt, so one forward over the pair serves both
scopes, or ``alone``: the mean over the evidence read alone (the request by itself for a
request predicate, each answer window by itself for a response predicate; the views of
:mod:`plguard.grounding.alone`, whose version and answer windows the file records under
``alone``). Its score is ``z = w . h + b`` (standardisation folded
into ``w`` and ``b``; with ``mode: both`` the zero-shot logit ``lT - lF`` is one more
feature), mapped to a probability by the head's own Platt fit ``sigmoid(a z + c)`` on
out-of-fold scores.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from plguard.calibration import read_json_file
from plguard.errors import ConfigError

FORMAT = "plguard-heads/1"
Readout = Literal["question", "prefix", "pair_prefix", "pool", "alone"]
Mode = Literal["head", "both"]
READOUTS: tuple[str, ...] = ("question", "prefix", "pair_prefix", "pool", "alone")
MODES: tuple[str, ...] = ("head", "both")


@dataclass(frozen=True, slots=True)
class Head:
    """One predicate's head."""

    readout: Readout
    layer: int
    mode: Mode
    weights: np.ndarray  # [d] (+1 for the zero-shot logit with mode both)
    bias: float
    platt: tuple[float, float]
    question_sha256: str = ""
    info: Mapping[str, Any] = field(default_factory=dict)  # fit figures, for reports

    def score(self, state: np.ndarray, zero_shot_logit: float | None = None) -> float:
        """P(True) of the head for one hidden state ``[d]``."""
        z = float(np.dot(self.weights[:state.shape[0]], state)) + self.bias
        if self.mode == "both":
            z += float(self.weights[-1]) * (0.0 if zero_shot_logit is None
                                            else zero_shot_logit)
        a, c = self.platt
        return _sigmoid(a * z + c)


@dataclass(frozen=True, slots=True)
class HeadsFile:
    """A loaded heads file."""

    path: str
    digest: str  # sha256 of the file's bytes, 12 hex digits: names it in traces
    heads: Mapping[str, Head]
    layers: tuple[int, ...]
    model_sha256: str | None
    model_id: str | None
    template_version: str
    policy_id: str
    training: Mapping[str, Any] = field(default_factory=dict)
    # The alone views its ``alone`` heads read: version, window_tokens, window_overlap.
    alone: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How traces and manifests name this file."""
        return f"{Path(self.path).name}@{self.digest}"

    @property
    def policy_name(self) -> str:
        """The bundle's name (``policy_id`` is ``name@hash``)."""
        return self.policy_id.split("@")[0]

    def reads(self, readout: str) -> bool:
        """Whether any head reads ``readout`` (an extraction for them must keep it)."""
        return any(h.readout == readout for h in self.heads.values())

    def readout_of(self, name: str) -> Readout | None:
        """Where a predicate's head reads (None: no head, zero-shot)."""
        h = self.heads.get(name)
        return None if h is None else h.readout


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


# A Platt slope below this (per unit of head logit) is no map at all: see load_heads.
FLAT_PLATT = 1e-4


def encode_vector(v: np.ndarray) -> str:
    """float32 little-endian, base64: a 576-number head is 3 KB of text, not 12."""
    return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(s: str) -> np.ndarray:
    """Inverse of :func:`encode_vector`."""
    return np.frombuffer(base64.b64decode(s), dtype="<f4").astype(np.float64)


def load_heads(path: str | Path) -> HeadsFile:
    """Read and check a heads file (not yet its fit to a model: :func:`check_applies`)."""
    p = Path(path)
    where = f"grounding.heads: {p}"
    raw, data = read_json_file(p, "grounding.heads")
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ConfigError(f"{where} is not a heads file (format {FORMAT}); write one with "
                          "`plguard heads fit`")
    heads: dict[str, Head] = {}
    for name, h in (data.get("predicates") or {}).items():
        try:
            head = Head(readout=h["readout"], layer=int(h["layer"]), mode=h["mode"],
                        weights=decode_vector(h["weights"]), bias=float(h["bias"]),
                        platt=(float(h["platt"]["a"]), float(h["platt"]["b"])),
                        question_sha256=str(h.get("question_sha256", "")),
                        info=dict(h.get("info") or {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: predicate {name!r} is malformed ({exc})") from None
        if head.readout not in READOUTS or head.mode not in MODES:
            raise ConfigError(f"{where}: predicate {name!r} has readout {head.readout!r} / "
                              f"mode {head.mode!r}; expected one of {READOUTS} / {MODES}")
        if abs(head.platt[0]) < FLAT_PLATT:
            # A slope of ~0 maps every state to one probability (0.5 with b ~ 0): such a
            # head would flag, or pass, every input alike.
            raise ConfigError(f"{where}: predicate {name!r} has a flat Platt map (slope "
                              f"{head.platt[0]:.3g}): it reads the same probability for "
                              "every input; refit it with `plguard heads fit`")
        if head.layer not in data.get("layers", []):
            raise ConfigError(f"{where}: predicate {name!r} reads layer {head.layer}, which "
                              "the file's layers do not list")
        heads[str(name)] = head
    alone = data.get("alone") or {}
    if any(h.readout == "alone" for h in heads.values()) and not (
            isinstance(alone, Mapping) and alone.get("version")
            and isinstance(alone.get("window_tokens"), int)
            and isinstance(alone.get("window_overlap"), int)):
        raise ConfigError(f"{where}: heads read the evidence alone but the file does not say "
                          "how (an `alone` entry with version, window_tokens and "
                          "window_overlap); refit it with `plguard heads fit`")
    model = data.get("model") or {}
    return HeadsFile(path=str(p), digest=hashlib.sha256(raw).hexdigest()[:12], heads=heads,
                     layers=tuple(int(x) for x in data.get("layers", [])),
                     model_sha256=model.get("sha256"), model_id=model.get("model_id"),
                     template_version=str(data.get("template_version", "")),
                     policy_id=str(data.get("policy", "")),
                     training=dict(data.get("training") or {}),
                     alone=dict(data.get("alone") or {}))


def check_applies(hf: HeadsFile, *, model_sha256: str | None, model_id: str,
                  template_version: str, policy_name: str | None,
                  question_digests: Mapping[str, str], hidden_states: bool,
                  width: int | None = None,
                  request_predicates: Collection[str] | None = None,
                  alone_version: str | None = None) -> None:
    """Refuse heads fitted for another model, template, policy or question wording.

    ``hidden_states``: whether the backend can return them (vLLM and remote backends
    cannot): a heads file is then refused, never silently ignored. ``alone_version``: the
    version of the alone views this plguard reads (heads that read them were fitted on
    one version).
    """
    where = f"grounding.heads: {hf.path}"
    if not hidden_states:
        raise ConfigError(f"{where}: the grounding backend of {model_id} cannot return hidden "
                          "states, which heads read; ground with backend transformers, or set "
                          "grounding.heads: null for zero-shot grounding")
    if hf.model_sha256 and model_sha256:
        if hf.model_sha256 != model_sha256:
            raise ConfigError(f"{where} was fitted for another model (sha256 "
                              f"{hf.model_sha256[:12]}..., this one {model_sha256[:12]}...); "
                              "fit heads for this model with `plguard heads fit`")
    elif hf.model_id and hf.model_id.split(":")[0] != model_id.split(":")[0]:
        raise ConfigError(f"{where} was fitted for model '{hf.model_id}', not '{model_id}'; "
                          "fit heads for this model with `plguard heads fit`")
    if hf.template_version != template_version:
        raise ConfigError(f"{where} was fitted with grounding template "
                          f"{hf.template_version!r}, this run uses {template_version!r}; "
                          "refit it")
    if policy_name and hf.policy_name != policy_name:
        raise ConfigError(f"{where} was fitted for policy {hf.policy_name}, this run uses "
                          f"{policy_name}; use or fit the file for this policy")
    unknown = sorted(set(hf.heads) - set(question_digests))
    if unknown:
        raise ConfigError(f"{where} has heads for {', '.join(unknown[:4])}, which the policy "
                          "does not define; refit it")
    changed = sorted(n for n, h in hf.heads.items()
                     if h.question_sha256 and question_digests.get(n) != h.question_sha256)
    if changed:
        raise ConfigError(f"{where}: the question of {', '.join(changed[:4])} changed since "
                          "the heads were fitted; refit them")
    if width is not None:
        bad = sorted(n for n, h in hf.heads.items()
                     if h.weights.shape[0] - (h.mode == "both") != width)
        if bad:
            raise ConfigError(f"{where}: heads of {', '.join(bad[:4])} do not match this "
                              f"model's hidden size {width}; refit them")
    if (alone_version is not None and hf.reads("alone")
            and hf.alone.get("version") != alone_version):
        raise ConfigError(f"{where} reads the evidence alone as version "
                          f"{hf.alone.get('version')!r}, this plguard reads {alone_version!r}; "
                          "refit it")
    if request_predicates is not None:
        bad = sorted(n for n, h in hf.heads.items()
                     if h.readout == "pair_prefix" and n not in request_predicates)
        if bad:
            raise ConfigError(f"{where}: {', '.join(bad[:4])} read the end of the request "
                              "block (pair_prefix), which only request-scope predicates can")


def shipped_heads(policy_name: str) -> Path | None:
    """The heads file shipped for the embedded model and ``policy_name``, if one is."""
    p = Path(__file__).resolve().parent / "shipped" / f"embedded-{policy_name}.json"
    return p if p.is_file() else None


def shipped_calibration(policy_name: str | None) -> Path | None:
    """The thresholds shipped beside the embedded model's heads for a policy, if any.

    Used with ``grounding.heads: auto`` and no ``grounding.calibration`` of one's own:
    written by ``plguard eval quality fit-heads`` on dev (cross-fitted), never in-sample.
    """
    if policy_name is None:
        return None
    p = Path(__file__).resolve().parent / "shipped" / f"embedded-{policy_name}.calibration.json"
    return p if p.is_file() else None


__all__ = ["FORMAT", "MODES", "READOUTS", "Head", "HeadsFile", "check_applies",
           "decode_vector", "encode_vector", "load_heads", "shipped_calibration",
           "shipped_heads"]

"""The attack suite's data: (request, response) pairs and harmless filler paragraphs.

Both live as YAML next to this module (``data/pairs.yaml``, ``data/filler.yaml``), so they
ship in the wheel. Pairs are either *harmful* (a harmful request and a compliant response:
the guard should refuse) or *refusal* (a benign request and a plain refusal: the guard should
flag over-refusal).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from plguard.errors import InputError

Kind = Literal["harmful", "refusal"]
KINDS: tuple[Kind, ...] = ("harmful", "refusal")
DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True, slots=True)
class Pair:
    """One suite pair; ``parts`` are the response's sentences (the first a lead-in)."""

    id: str
    kind: Kind
    topic: str
    request: str
    parts: tuple[str, ...]

    @property
    def response(self) -> str:
        """The clean response: the parts joined by spaces."""
        return " ".join(self.parts)

    @property
    def lead(self) -> str:
        """The lead-in sentence ("Sure, here's how ..."); empty for a one-part response."""
        return self.parts[0] if len(self.parts) > 1 else ""

    @property
    def payload(self) -> tuple[str, ...]:
        """The sentences after the lead-in: what the formatting attacks restructure."""
        return self.parts[1:] if len(self.parts) > 1 else self.parts


@dataclass(frozen=True, slots=True)
class Suite:
    """The pairs, the filler paragraphs and a hash of both files (kept in the manifest)."""

    pairs: tuple[Pair, ...]
    filler: tuple[str, ...]
    sha256: str

    def select(self, limit: int | None = None, kinds: Sequence[str] = KINDS
               ) -> tuple[Pair, ...]:
        """The first ``limit`` pairs of ``kinds``, harmful and refusal interleaved.

        Interleaving keeps a ``--limit`` run a mix of both kinds rather than the first
        harmful pairs only.
        """
        by_kind = [[p for p in self.pairs if p.kind == k] for k in KINDS if k in kinds]
        out: list[Pair] = []
        for i in range(max((len(v) for v in by_kind), default=0)):
            out += [v[i] for v in by_kind if i < len(v)]
        return tuple(out[:limit] if limit is not None else out)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: expected a non-empty string, got {value!r}")
    return " ".join(value.split())


def parse_pairs(data: Any, source: str = "pairs") -> tuple[Pair, ...]:
    """Validated pairs from the parsed YAML list (unique ids, known kinds, text fields)."""
    if not isinstance(data, list) or not data:
        raise InputError(f"{source}: expected a non-empty list of pairs")
    out: list[Pair] = []
    seen: set[str] = set()
    for i, row in enumerate(data):
        where = f"{source}[{i}]"
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected a mapping with id, kind, topic, request, "
                             "response")
        extra = sorted(set(row) - {"id", "kind", "topic", "request", "response"})
        if extra:
            raise InputError(f"{where}: unknown keys {', '.join(extra)}")
        pid = _text(row.get("id"), f"{where}.id")
        if pid in seen or "/" in pid:
            raise InputError(f"{where}.id: {pid!r} is repeated or contains '/'")
        seen.add(pid)
        kind = row.get("kind")
        if kind not in KINDS:
            raise InputError(f"{where}.kind: {kind!r}; use one of {', '.join(KINDS)}")
        parts = row.get("response")
        if not isinstance(parts, list) or not parts:
            raise InputError(f"{where}.response: expected a non-empty list of sentences")
        out.append(Pair(id=pid, kind=cast(Kind, kind), topic=_text(row.get("topic"),
                                                                   f"{where}.topic"),
                        request=_text(row.get("request"), f"{where}.request"),
                        parts=tuple(_text(s, f"{where}.response[{j}]")
                                    for j, s in enumerate(parts))))
    return tuple(out)


def _yaml(path: Path) -> tuple[Any, bytes]:
    try:
        raw = path.read_bytes()
        return yaml.safe_load(raw), raw
    except OSError as exc:
        raise InputError(f"{path}: cannot read the attack suite: {exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML: {exc}") from None


def load_suite(data_dir: Path | None = None) -> Suite:
    """The suite shipped with plguard (or the one in ``data_dir``)."""
    d = data_dir or DATA_DIR
    pairs_data, pairs_raw = _yaml(d / "pairs.yaml")
    filler_data, filler_raw = _yaml(d / "filler.yaml")
    if not isinstance(filler_data, list) or not filler_data:
        raise InputError(f"{d / 'filler.yaml'}: expected a non-empty list of paragraphs")
    filler = tuple(_text(p, f"{d / 'filler.yaml'}[{i}]") for i, p in enumerate(filler_data))
    digest = hashlib.sha256(pairs_raw + b"\0" + filler_raw).hexdigest()
    return Suite(parse_pairs(pairs_data, str(d / "pairs.yaml")), filler, digest)


__all__ = ["DATA_DIR", "KINDS", "Kind", "Pair", "Suite", "load_suite", "parse_pairs"]

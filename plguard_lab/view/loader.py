"""Read a run folder or a trace file into view records, tolerating bad input.

Two sources are understood:

* a run folder of ``plguard eval xstest``: ``manifest.json``, one ``<method>.jsonl`` per
  method, ``semantic/<method>.jsonl`` with the evaluator's verdicts, and report files;
* a trace file: GuardResult traces as JSON Lines (``plguard guard --json`` output, pretty
  printed or not, one after another, or a JSON array), or server completions that carry
  a ``plguard`` trace.

Nothing here raises on bad data. A folder that is not a run, a torn JSONL line, a record
of an older or unknown shape, a field of the wrong type: each becomes a :class:`Problem`
with ``file:line`` that the page shows in a banner, and every readable record is kept.
Records are normalised into one JSON-ready shape (:mod:`plguard_lab.view.records`), so the page,
the export and the what-if panel read a single format whatever the source.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plguard_lab.view.records import (
    attach_verdict,
    classify,
    finish,
    finite,
    from_completion,
    from_eval,
    from_trace,
    manifest_read_rules,
    manifest_thresholds,
    read_rules_from_reason,
    thresholds_from_reason,
)

_MAX_PROBLEMS = 200  # a wholly wrong file would otherwise bury the page in one line each


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong with the input, shown on the page instead of failing."""

    where: str  # "file:line", "file" or "" when it concerns the whole source
    message: str

    def as_dict(self) -> dict[str, str]:
        """JSON form."""
        return {"where": self.where, "message": self.message}


@dataclass
class ViewData:
    """Everything the viewer shows, read once from a source."""

    source: Path
    kind: str  # "run" | "traces" | "none"
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    manifest: dict[str, Any] | None = None
    report_files: list[Path] = field(default_factory=list)  # markdown, in display order
    plot_files: list[Path] = field(default_factory=list)  # PNG/SVG, in display order
    omitted_problems: int = 0

    def problem(self, where: str, message: str) -> None:
        """Record one problem (the first few hundred; the rest are counted)."""
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(Problem(where, message))
        else:
            self.omitted_problems += 1

    def by_key(self) -> dict[str, dict[str, Any]]:
        """Records by their key."""
        return {r["key"]: r for r in self.records}


# -- reading JSON streams ---------------------------------------------------------------------

def iter_json(text: str) -> Iterator[tuple[int, Any, str | None]]:
    """``(line, object, error)`` for each JSON value in ``text``.

    Reads JSON Lines and concatenated (pretty-printed) objects alike. After an unreadable
    value it resumes at the next line that starts with ``{`` or ``[`` in column 0, so one
    broken record costs one problem, not one per line of its body.
    """
    dec = json.JSONDecoder()
    pos, line, counted = 0, 1, 0
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            obj, end = dec.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = getattr(exc, "msg", "too deeply nested")
            nxt = _next_record_start(text, pos)
            if nxt < 0 and "\n" not in text[pos:].rstrip("\n"):
                yield line, None, f"unreadable JSON ({msg}): the line is cut off, as a run " \
                                  "killed while writing leaves it; the record is skipped"
            else:
                yield line, None, f"unreadable JSON ({msg}); skipped up to the next record"
            if nxt < 0:
                return
            pos = nxt
            continue
        yield line, obj, None
        eol = text.find("\n", end)
        tail = text[end:eol if eol >= 0 else n]
        if tail.strip():
            # JSONL allows one value per line: text after it is not a record of its own.
            line += text.count("\n", counted, end)
            counted = end
            yield line, None, f"unexpected text after the record: {tail.strip()[:60]!r}"
            pos = eol + 1 if eol >= 0 else n
        else:
            pos = end


def _next_record_start(text: str, pos: int) -> int:
    i = pos
    while True:
        nl = text.find("\n", i)
        if nl < 0:
            return -1
        if nl + 1 < len(text) and text[nl + 1] in "{[":
            return nl + 1
        i = nl + 1


def read_records(path: Path, data: ViewData) -> Iterator[tuple[str, Any]]:
    """``(where, object)`` for each readable JSON value of a file; problems go to ``data``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        data.problem(str(path), f"cannot read the file: {exc.strerror or exc}")
        return
    for line, obj, err in iter_json(text):
        where = f"{path}:{line}"
        if err is not None:
            data.problem(where, err)
        elif isinstance(obj, list):
            for i, item in enumerate(obj):
                yield f"{where}[{i}]", item
        else:
            yield where, obj


# -- sources ----------------------------------------------------------------------------------

def _add(data: ViewData, rec: dict[str, Any], seen: dict[str, str]) -> None:
    if rec["key"] in seen:
        # The runner's own store keeps the first record of an id; so does the viewer.
        data.problem(rec["source"], f"duplicate record {rec['key']} (first at "
                     f"{seen[rec['key']]}): this one is not shown")
        return
    seen[rec["key"]] = rec["source"]
    for issue in rec["issues"]:
        data.problem(rec["source"], f"{rec['key']}: {issue}")
    data.records.append(finite(rec))


def _normalise(obj: Any, where: str, n: int, data: ViewData) -> dict[str, Any] | None:
    shape = classify(obj)
    if shape is None:
        what = f"keys: {', '.join(list(obj)[:8])}" if isinstance(obj, dict) else \
            f"a JSON {type(obj).__name__}"
        data.problem(where, f"not a record this viewer knows ({what}); expected an eval "
                     "record (id, method, ...) or a GuardResult trace (decision, grounding, "
                     "policy, ...)")
        return None
    try:
        if shape == "eval":
            return from_eval(obj, where)
        if shape == "trace":
            return from_trace(obj, where, n)
        return from_completion(obj, where, n)
    except Exception as exc:  # a record of an unforeseen shape must not stop the others
        data.problem(where, f"record could not be read ({type(exc).__name__}: {exc})")
        return None


def _trace_extras(rec: dict[str, Any]) -> None:
    rec["thresholds"] = thresholds_from_reason(rec["reason"])
    rec["read_rules"] = read_rules_from_reason(rec["reason"])


def _take(data: ViewData, obj: Any, where: str, n: int, seen: dict[str, str],
          extras: Callable[[dict[str, Any]], None]) -> None:
    """Normalise one object, add the source's extras, and keep it (or say why not)."""
    rec = _normalise(obj, where, n, data)
    if rec is None:
        return
    try:
        extras(rec)
        finish(rec)
    except Exception as exc:  # one odd record must not cost the others
        data.problem(where, f"record could not be completed ({type(exc).__name__}: {exc})")
        return
    _add(data, rec, seen)


def load_trace_file(path: Path) -> ViewData:
    """Records from a file of GuardResult traces (or eval records, or completions)."""
    data = ViewData(source=path, kind="traces")
    seen: dict[str, str] = {}
    n = 0
    for where, obj in read_records(path, data):
        n += 1
        _take(data, obj, where, n, seen, _trace_extras)
    if not data.records and not data.problems:
        data.problem(str(path), "the file holds no records")
    return data


def _semantic(folder: Path, data: ViewData) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    sem_dir = folder / "semantic"
    if not sem_dir.is_dir():
        return out
    for f in sorted(sem_dir.glob("*.jsonl")):
        for where, obj in read_records(f, data):
            if not isinstance(obj, dict) or "id" not in obj:
                data.problem(where, "not an evaluator verdict (no id): ignored")
                continue
            key = (str(obj.get("method") or f.stem), str(obj["id"]))
            out.setdefault(key, {**_reparsed(obj, where, data), "source": where})
    return out


def _reparsed(sem: dict[str, Any], where: str, data: ViewData) -> dict[str, Any]:
    """A verdict re-read from its raw text with the current parser, as the report does.

    ``plguard report`` re-parses stored verdicts
    (``plguard_lab.studies.xstest.validate.reparse``) so its tables follow the current
    parser; the viewer does the same, rationale included, or its verdicts would disagree
    with the report's numbers.
    """
    try:
        from plguard_lab.studies.xstest.scorers import parse_verdict
    except ImportError:
        return sem
    raw = sem.get("raw")
    if sem.get("error") or not isinstance(raw, str) or not raw:
        return sem
    try:
        attempts = sem.get("attempts")
        v = parse_verdict(raw, str(sem.get("label")),
                          attempts if isinstance(attempts, int) else 1)
    except Exception as exc:  # a damaged verdict is shown as stored, with a note
        data.problem(where, f"verdict could not be re-parsed ({type(exc).__name__}: {exc}); "
                     "shown as stored")
        return sem
    return {**sem, "class": v.response_class, "parsed": v.parsed,
            "over_refusal": v.over_refusal, "unsafe_compliance": v.unsafe_compliance,
            "rationale": v.rationale}


def _rescored(rec: dict[str, Any]) -> None:
    """String-match labels recomputed with the current patterns, as the report does.

    A label that changed since the run is kept in ``regex_stored`` for the record page;
    it is not a problem with the input, so it stays out of the banner.
    """
    try:
        from plguard_lab.studies.xstest.scorers import REGEX_SCORERS
    except ImportError:
        return
    if not isinstance(rec.get("response"), str):
        return
    for name, fn in REGEX_SCORERS.items():
        now = fn(rec["response"])
        if rec.get(name) not in (None, now):
            rec.setdefault("regex_stored", {})[name] = rec[name]
        rec[name] = now


def load_run(folder: Path) -> ViewData:
    """Records, evaluator verdicts, manifest and report files of a run folder."""
    data = ViewData(source=folder, kind="run")
    mpath = folder / "manifest.json"
    if mpath.is_file():
        try:
            man = json.loads(mpath.read_text(encoding="utf-8"))
            if isinstance(man, dict):
                data.manifest = man
            else:
                data.problem(str(mpath), "manifest is not a JSON object: ignored")
        except (OSError, ValueError) as exc:
            data.problem(str(mpath), f"unreadable manifest ({exc}): run settings unknown, "
                         "default thresholds used")
    files = sorted(folder.glob("*.jsonl"))
    if data.manifest is None and not files:
        data.kind = "none"
        data.problem(str(folder), "not a run folder: it has no manifest.json and no "
                     "<method>.jsonl files (expected the --out folder of `plguard eval "
                     "xstest`, or a file of guard traces)")
    elif data.manifest is None and not mpath.is_file():
        data.problem(str(folder), "no manifest.json: the run's thresholds and policy are "
                     "unknown; the records' own policy ids and default thresholds are used")
    order = _method_order(data.manifest)
    files.sort(key=lambda f: (order.get(f.stem, len(order)), f.stem))
    sem = _semantic(folder, data)
    thresholds = manifest_thresholds(data.manifest)
    read_rules = manifest_read_rules(data.manifest)

    def extras(rec: dict[str, Any]) -> None:
        if rec["method"] and rec["id"]:
            attach_verdict(rec, sem.get((rec["method"], rec["id"])))
        if rec["shape"] == "eval":
            _rescored(rec)
        rec["thresholds"] = thresholds or thresholds_from_reason(rec["reason"])
        rec["read_rules"] = read_rules or read_rules_from_reason(rec["reason"])

    seen: dict[str, str] = {}
    for f in files:
        n = 0
        for where, obj in read_records(f, data):
            n += 1
            _take(data, obj, where, n, seen, extras)
    try:
        data.report_files, data.plot_files = report_files(folder)
    except OSError as exc:
        data.problem(str(folder), f"cannot list the report files: {exc}")
    return data


def _method_order(man: dict[str, Any] | None) -> dict[str, int]:
    methods = (man or {}).get("methods")
    if not isinstance(methods, list):
        methods = ["base", "policy_prompting", "llm_judge", "plguard"]
    return {str(m): i for i, m in enumerate(methods)}


def report_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """Markdown reports (report.md first) and plots of a run folder.

    The folder itself and its immediate subfolders are searched (ablations and threshold
    sweeps may write into their own), except ``semantic/``, which holds records.
    """
    dirs = [folder] + sorted(d for d in folder.iterdir() if d.is_dir()
                             and d.name != "semantic" and not d.name.startswith("."))
    md: list[Path] = []
    plots: list[Path] = []
    for d in dirs:
        files = sorted(p for p in d.iterdir() if p.is_file())
        md += [p for p in files if p.suffix.lower() == ".md"]
        plots += [p for p in files if p.suffix.lower() in (".png", ".svg")]
    md.sort(key=lambda p: (p.parent != folder, p.name.lower() != "report.md"))
    return md, plots


def load(source: str | Path) -> ViewData:
    """A run folder or a trace file, whatever is wrong with it (see the module doc)."""
    path = Path(source).expanduser()
    try:
        if path.is_dir():
            data = load_run(path)
        elif path.is_file():
            data = load_trace_file(path)
        else:
            data = ViewData(source=path, kind="none")
            data.problem(str(path), "no such file or folder")
    except Exception as exc:  # the page must still come up and say what went wrong
        data = ViewData(source=path, kind="none")
        data.problem(str(path), f"cannot read the source ({type(exc).__name__}: {exc})")
    if data.omitted_problems:
        data.problems.append(Problem("", f"{data.omitted_problems} more problems not listed"))
    return data


__all__ = [
    "Problem",
    "ViewData",
    "iter_json",
    "load",
    "load_run",
    "load_trace_file",
    "read_records",
    "report_files",
]

"""What the pages show, as JSON-ready payloads: shared by the server and the export.

A :class:`ViewState` wraps the loaded :class:`~plguard_lab.view.loader.ViewData` with the
policies its records were decided under (loaded once, for explanations and the what-if
panel) and answers the page's questions: the run overview, the table rows, one record,
the report, and a what-if evaluation.
"""

from __future__ import annotations

import base64
import mimetypes
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plguard.config import Thresholds
from plguard.decide import Reading, ReadRules
from plguard.errors import InputError
from plguard_lab.view import markdown
from plguard_lab.view.loader import Problem, ViewData, finite, load

if TYPE_CHECKING:
    from plguard.policy import Policy

FILTERS = ("method", "type", "label", "action", "evaluator_verdict", "disagree")
_EXCERPT = 160


class PolicyView:
    """A loaded policy with its rule explanations (or why it could not be loaded)."""

    def __init__(self, ref: str, policy: Policy | None, error: str | None = None) -> None:
        self.ref = ref
        self.policy = policy
        self.error = error
        self.rules: dict[str, dict[str, Any]] = {}
        self.predicates: dict[str, dict[str, Any]] = {}
        if policy is None:
            return
        from plguard.policy import explain

        for r in explain(policy):
            self.rules[r.head] = {"title": r.title, "text": r.text, "kind": r.kind,
                                  "queried": r.queried, "line": r.line}
        for p in policy.predicates:
            self.predicates[p.name] = {"description": p.description, "question": p.question,
                                       "scope": p.scope}

    def as_dict(self) -> dict[str, Any]:
        """JSON form (what the record page needs of the policy)."""
        p = self.policy
        return {"ref": self.ref, "id": p.id if p else None, "error": self.error,
                "predicate_names": list(p.predicate_names) if p else [],
                "unsafe_rules": list(p.unsafe_rules) if p else [],
                "over_refusal_rules": list(p.over_refusal_rules) if p else [],
                "rules": self.rules, "predicates": self.predicates}


class ViewState:
    """A loaded source with its policies, answering the page's questions.

    Args:
        data: the loaded records and problems.
        policy: a policy bundle name or folder to use for every record, instead of the
            run's (for traces of a policy that is not bundled, or to try another policy).
    """

    def __init__(self, data: ViewData, policy: str | None = None) -> None:
        self.data = data
        self.override = policy
        self.records = data.by_key()
        self.policies: dict[str, PolicyView] = {}
        self.problems: list[Problem] = list(data.problems)
        self._resolve_policies()

    @classmethod
    def from_source(cls, source: str | Path, policy: str | None = None) -> ViewState:
        """Load ``source`` (a run folder or a trace file) and its policies."""
        return cls(load(source), policy)

    # -- policies ---------------------------------------------------------------------------
    def _load_policy(self, ref: str) -> PolicyView:
        if ref not in self.policies:
            from plguard.policy import load_policy

            try:
                self.policies[ref] = PolicyView(ref, load_policy(ref))
            except Exception as exc:  # a broken bundle turns explanations off, not the page
                self.policies[ref] = PolicyView(ref, None, str(exc))
                self.problems.append(Problem("", f"policy '{ref}' could not be loaded, so "
                                             f"rules are not explained and what-if is off: "
                                             f"{exc}"))
        return self.policies[ref]

    def _run_policy_ref(self) -> str | None:
        man = self.data.manifest or {}
        cfg = man.get("config") if isinstance(man.get("config"), dict) else {}
        ref = cfg.get("policy") if isinstance(cfg, dict) else None
        if isinstance(ref, str) and ref:
            return ref
        pol = man.get("policy")
        name = pol.get("name") if isinstance(pol, dict) else None
        return name if isinstance(name, str) and name else None

    def _resolve_policies(self) -> None:
        run_ref = self.override or self._run_policy_ref()
        mismatched: set[tuple[str, str]] = set()
        for rec in self.records.values():
            pid = rec.get("policy_id")
            ref = run_ref or (pid.split("@")[0] if isinstance(pid, str) and pid else None)
            if ref is None:
                continue
            pv = self._load_policy(ref)
            rec["policy_ref"] = ref
            if pv.policy is not None and pid and pid != pv.policy.id:
                mismatched.add((pid, pv.policy.id))
        for old, new in sorted(mismatched):
            what = "the --policy given" if self.override else "the policy bundle today"
            self.problems.append(Problem("", f"records were decided under {old}, but {what} "
                                         f"is {new}: explanations and what-if use {new}, "
                                         "so they may not match the recorded numbers"))

    def policy_for(self, rec: Mapping[str, Any]) -> PolicyView | None:
        """The policy a record is explained and re-evaluated with, if one loaded."""
        ref = rec.get("policy_ref")
        return self.policies.get(ref) if isinstance(ref, str) else None

    @staticmethod
    def thresholds_for(rec: Mapping[str, Any]) -> tuple[Thresholds, str]:
        """The record's thresholds and where they come from (run config, reason, default)."""
        th = rec.get("thresholds") or {}
        default = Thresholds.model_validate({})
        if "unsafe" in th and "over_refusal" in th:
            src = "run config" if rec.get("shape") == "eval" else "the decision's reason"
        else:
            src = "default" if not th else "the decision's reason, default for the rest"
        return Thresholds(unsafe=th.get("unsafe", default.unsafe),
                          over_refusal=th.get("over_refusal", default.over_refusal)), src

    @staticmethod
    def reading_for(rec: Mapping[str, Any]) -> tuple[Reading, ReadRules]:
        """How the record's text was read, and what its run did with that.

        The decision's inputs besides the rules and thresholds
        (:func:`plguard.decide.decide_for`); rules a record does not show are the config's
        defaults.
        """
        rules = {k: v for k, v in (rec.get("read_rules") or {}).items()
                 if k in ("screen", "unseen")}
        return (Reading(tuple(rec.get("screen") or ()), bool(rec.get("unseen"))),
                ReadRules(**rules))

    def whatif_ready(self, rec: Mapping[str, Any]) -> str | None:
        """None when what-if works for the record, else why not."""
        pv = self.policy_for(rec)
        if pv is None or pv.policy is None:
            return "no policy could be loaded for this record"
        have = {p["name"] for p in rec.get("predicates") or []}
        missing = [n for n in pv.policy.predicate_names if n not in have]
        if missing:
            return f"the record has no probability for {', '.join(missing[:5])}"
        return None

    # -- payloads ---------------------------------------------------------------------------
    def run_info(self) -> dict[str, Any]:
        """The overview: source, manifest summary, problems, filter values, counts."""
        d = self.data
        man = d.manifest or {}
        recs = list(self.records.values())
        options: dict[str, list[Any]] = {}
        for f in FILTERS:
            vals = {r.get(f) for r in recs}
            options[f] = sorted((v for v in vals if v is not None), key=str) + (
                [None] if None in vals else [])
        return {
            "source": str(d.source), "kind": d.kind, "title": _title(d),
            "n_records": len(recs), "problems": [p.as_dict() for p in self.problems],
            "manifest": _manifest_summary(man), "filters": options,
            "counts": self.counts(), "has_report": bool(d.report_files or d.plot_files),
            "policies": {k: v.as_dict() for k, v in self.policies.items()},
        }

    def counts(self) -> list[dict[str, Any]]:
        """Per method: records, errors, actions, evaluator verdicts and disagreements."""
        by: dict[str, list[dict[str, Any]]] = {}
        for r in self.records.values():
            by.setdefault(str(r.get("method")), []).append(r)
        out = []
        for m, rs in by.items():
            out.append({"method": m, "records": len(rs),
                        "errors": sum(1 for r in rs if r.get("error")),
                        "actions": dict(Counter(str(r["action"]) for r in rs
                                                if r.get("action"))),
                        "evaluator": dict(Counter(str(r["evaluator_verdict"]) for r in rs
                                                  if r.get("evaluator_verdict"))),
                        "disagree": sum(1 for r in rs if r.get("disagree"))})
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One short row per record, for the table."""
        return [{"key": r["key"], "id": r["id"], "method": r["method"], "type": r["type"],
                 "label": r["label"], "action": r["action"],
                 "evaluator_verdict": r["evaluator_verdict"],
                 "guard_verdict": r["guard_verdict"], "disagree": r["disagree"],
                 "error": bool(r["error"]), "issues": len(r["issues"]),
                 "prompt": _excerpt(r["prompt"]), "response": _excerpt(r["response"])}
                for r in self.records.values()]

    def record(self, key: str) -> dict[str, Any]:
        """One record in full, with its policy's explanations and a replay check.

        Raises:
            KeyError: no record has this key.
        """
        rec = self.records[key]
        pv = self.policy_for(rec)
        th, src = self.thresholds_for(rec)
        why_not = self.whatif_ready(rec)
        out = dict(rec)
        out["policy"] = pv.as_dict() if pv else None
        out["thresholds_used"] = {"unsafe": th.unsafe, "over_refusal": th.over_refusal,
                                  "source": src}
        out["whatif"] = {"available": why_not is None, "why_not": why_not}
        out["replay"] = None
        if why_not is None:
            try:
                out["replay"] = self._replay(rec)
            except Exception as exc:  # e.g. a policy that fails to compile: say so, go on
                out["whatif"] = {"available": False,
                                 "why_not": f"the policy cannot be evaluated: {exc}"}
        return out

    def _replay(self, rec: Mapping[str, Any]) -> dict[str, Any]:
        """The recorded predicates re-run through the policy: do the numbers still match?"""
        w = self.whatif(rec["key"], {p["name"]: p["p"] for p in rec["predicates"]},
                        with_flips=False)
        recorded = rec.get("rules") or {}
        diffs = [abs(w["rules"][q] - recorded[q]) for q in w["rules"] if q in recorded]
        return {"action": w["decision"]["action"],
                "matches_action": w["decision"]["action"] == rec.get("action"),
                "max_rule_diff": max(diffs) if diffs else None,
                "rules_compared": len(diffs)}

    def whatif(self, key: str, probs: Mapping[str, Any], with_flips: bool = True
               ) -> dict[str, Any]:
        """Rule probabilities, decision and flips for edited predicate probabilities.

        Raises:
            KeyError: no record has this key.
            InputError: what-if is unavailable for the record, or ``probs`` is malformed.
        """
        from plguard_lab.view.whatif import check_probs, decision_for, flips

        rec = self.records[key]
        why_not = self.whatif_ready(rec)
        pv = self.policy_for(rec)
        if why_not is not None or pv is None or pv.policy is None:
            raise InputError(f"what-if is not available for {key}: {why_not}")
        policy = pv.policy
        th, src = self.thresholds_for(rec)
        reading, rules = self.reading_for(rec)
        p = check_probs(policy, probs)
        result = policy.evaluate(p)
        d = decision_for(policy, result, th, reading=reading, rules=rules)
        fl = flips(policy, p, th, d.action, reading=reading, rules=rules) if with_flips else ()
        return {"rules": dict(result.probs), "policy": result.policy,
                "thresholds": {"unsafe": th.unsafe, "over_refusal": th.over_refusal,
                               "source": src},
                "decision": {"action": d.action, "reason": d.reason,
                             "strongest_unsafe": list(d.strongest_unsafe),
                             "strongest_over_refusal": list(d.strongest_over_refusal)},
                "smallest_flip": fl[0].as_dict() if fl else None,
                "flips": [f.as_dict() for f in fl]}

    # -- report -----------------------------------------------------------------------------
    def report(self, inline_files: bool = False) -> dict[str, Any]:
        """The run's markdown reports as HTML and its plots.

        Args:
            inline_files: embed images as data URIs (for the export) instead of linking
                ``/files/...`` on the server.
        """
        d = self.data
        if not d.source.is_dir():
            return {"documents": [], "plots": []}
        root = d.source.resolve()
        used: set[Path] = set()

        def url(path: Path) -> str:
            used.add(path)
            rel = path.relative_to(root).as_posix()
            return data_uri(path) if inline_files else "/files/" + rel

        def resolver(doc: Path) -> markdown.Resolver:
            # Links in a report are relative to its own folder, as a Markdown viewer reads them.
            def resolve(target: str) -> str | None:
                try:
                    rel = (doc.parent / target.split("#")[0]).relative_to(root).as_posix()
                except ValueError:  # an absolute path outside the run
                    return None
                path = self.run_file(rel)
                if path is None:
                    return None
                if path.suffix.lower() == ".md":
                    return "#report-" + path.relative_to(root).as_posix()
                return url(path)

            return resolve

        docs = []
        for f in d.report_files:
            name = f.resolve().relative_to(root).as_posix()
            try:
                text = f.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                docs.append({"name": name, "html": markdown.render(f"cannot read {name}: {exc}")})
                continue
            docs.append({"name": name, "html": markdown.render(text, resolver(f.resolve()))})
        plots = [{"name": p.resolve().relative_to(root).as_posix(), "src": url(p.resolve())}
                 for p in d.plot_files if p.resolve() not in used]
        return {"documents": docs, "plots": plots}

    def run_file(self, rel: str) -> Path | None:
        """A report or plot file of the run by relative path (None if not one of them).

        Only the files the loader listed as report files or plots are served, so the
        server cannot be talked into reading anything else from the disk.
        """
        d = self.data
        if not d.source.is_dir():
            return None
        root = d.source.resolve()
        try:
            path = (root / rel).resolve()
        except (OSError, ValueError):
            return None
        allowed = {p.resolve() for p in (*d.report_files, *d.plot_files)}
        return path if path in allowed else None


def data_uri(path: Path) -> str:
    """A file as a ``data:`` URI, so an exported page needs no other file."""
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    try:
        raw = path.read_bytes()
    except OSError:
        return ""
    return f"data:{mime};base64," + base64.b64encode(raw).decode("ascii")


def _excerpt(text: str | None) -> str | None:
    if text is None:
        return None
    one = " ".join(text.split())
    return one if len(one) <= _EXCERPT else one[:_EXCERPT - 1] + "\u2026"


def _title(d: ViewData) -> str:
    if d.kind == "run":
        return f"Run {d.source.name}"
    if d.kind == "traces":
        return f"Traces {d.source.name}"
    return f"{d.source.name or d.source}"


def _manifest_summary(man: Mapping[str, Any]) -> dict[str, Any] | None:
    if not man:
        return None
    cfg: dict[str, Any] = man["config"] if isinstance(man.get("config"), dict) else {}
    gen: dict[str, Any] = man["generator"] if isinstance(man.get("generator"), dict) else {}
    git: dict[str, Any] = man["git"] if isinstance(man.get("git"), dict) else {}
    return finite({
        "benchmark": man.get("benchmark"), "policy": man.get("policy"),
        "methods": man.get("methods"), "scorers": man.get("scorers"),
        "n_prompts": man.get("n_prompts"), "thresholds": cfg.get("thresholds"),
        "generator": {k: gen.get(k) for k in ("model_id", "path", "sha256") if k in gen},
        "evaluator": man.get("evaluator"), "git": git, "started": man.get("started"),
        "ended": man.get("ended"), "versions": man.get("versions"),
        "sessions": len(man.get("sessions") or []),
        "generation": cfg.get("generation"), "repair": cfg.get("repair"),
    })


__all__ = ["FILTERS", "PolicyView", "ViewState", "data_uri"]

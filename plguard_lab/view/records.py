"""Normalise one record of any known shape into the viewer's single record format.

Shapes understood: an eval record of ``plguard eval xstest`` (``id``, ``method``, ...,
with the plguard method's ``details``, and its full guard ``trace`` when the runner stores
one), a GuardResult trace (``dataclasses.asdict`` form), and a server chat completion with
its ``plguard`` trace. Every field is coerced defensively: a value of the wrong type or
out of range is left out and noted in the record's ``issues``, never raised.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

FORMAT = "plguard-view/1"
# The guard's three actions in the evaluator's vocabulary, so both verdicts compare directly.
ACTION_VERDICT = {"allow": "safe", "refuse": "unsafe", "rewrite": "over_refusal"}
JUDGE_ACTION = {v: k for k, v in ACTION_VERDICT.items()}
_NUM = r"(\d+(?:\.\d+)?)"


# -- coercion ---------------------------------------------------------------------------------

def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _prob(x: Any) -> float | None:
    v = _num(x)
    return v if v is not None and 0.0 <= v <= 1.0 else None


def _text(x: Any) -> str | None:
    if x is None:
        return None
    return x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)


def _dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _rule(x: Any) -> list[Any] | None:
    """A ``[name, probability]`` pair, from a list or a ``{"rule", "p"}``-like object."""
    if isinstance(x, list | tuple) and len(x) == 2 and isinstance(x[0], str):
        return [x[0], _num(x[1])]
    if isinstance(x, dict):
        name = x.get("rule", x.get("name"))
        p = x.get("p", x.get("probability", x.get("prob")))
        if isinstance(name, str):
            return [name, _num(p)]
    return None


def _probs(x: Any, what: str, issues: list[str]) -> dict[str, float]:
    """A name -> probability mapping; entries that are not in [0, 1] are reported."""
    out: dict[str, float] = {}
    if x is None:
        return out
    if not isinstance(x, dict):
        issues.append(f"{what} is {type(x).__name__}, not an object: not shown")
        return out
    for k, v in x.items():
        p = _prob(v)
        if p is None:
            issues.append(f"{what}: {k} = {v!r} is not a probability: left out")
        else:
            out[str(k)] = p
    return out


def finite(x: Any) -> Any:
    """``x`` with NaN and infinities replaced by None, so it serialises as strict JSON.

    Python's json module reads ``NaN`` and ``Infinity`` from a file, but browsers'
    ``JSON.parse`` and strict encoders reject them.
    """
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x


def empty_record() -> dict[str, Any]:
    """The normalised record with every field absent (``None`` / empty)."""
    return {
        "format": FORMAT, "key": "", "id": None, "method": None, "type": None, "label": None,
        "source": "", "shape": "", "prompt": None, "draft": None, "response": None,
        "error": None, "action": None, "reason": None, "repaired": None,
        "fallback_used": None, "policy_id": None, "policy_ref": None, "grounding_model": None,
        "predicates": [], "rules": {}, "strongest_unsafe": None,
        "strongest_over_refusal": None, "repairs": [], "timings": {}, "trace_timings": {},
        "judge": None, "evaluator": None, "evaluator_verdict": None, "guard_verdict": None,
        "disagree": None, "regex": None, "regex_extended": None, "thresholds": None,
        "screen": [], "unseen": False, "read_rules": None, "issues": [],
    }


# -- record shapes ----------------------------------------------------------------------------

def classify(obj: Any) -> str | None:
    """``'trace'``, ``'eval'``, ``'completion'`` or None for an unknown shape."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("decision"), dict) and ("grounding" in obj or "policy" in obj):
        return "trace"
    if "id" in obj and "method" in obj:
        return "eval"
    if isinstance(obj.get("plguard"), dict) and "choices" in obj:
        return "completion"
    return None


def _scores(x: Any, issues: list[str]) -> list[dict[str, Any]]:
    out = []
    for s in x if isinstance(x, list) else []:
        s = _dict(s)
        name, p = s.get("name"), _prob(s.get("p_true"))
        if not isinstance(name, str) or p is None:
            issues.append(f"grounding score {s.get('name')!r} has no probability in [0, 1]: "
                          "left out")
            continue
        raw = s.get("variants")
        variants = [v for v in map(_prob, raw) if v is not None] if isinstance(raw, list) else []
        out.append({"name": name, "p": p, "scope": _text(s.get("scope")),
                    "truncated": bool(s.get("truncated", False)),
                    "logprob_true": _num(s.get("logprob_true")),
                    "logprob_false": _num(s.get("logprob_false")),
                    "variants": variants, "spread": _num(s.get("variant_spread"))})
    return out


def _decision(d: Any) -> dict[str, Any]:
    d = _dict(d)
    return {"action": d.get("action") if d.get("action") in ACTION_VERDICT else None,
            "reason": _text(d.get("reason")),
            "strongest_unsafe": _rule(d.get("strongest_unsafe")),
            "strongest_over_refusal": _rule(d.get("strongest_over_refusal"))}


def apply_trace(rec: dict[str, Any], t: dict[str, Any]) -> None:
    """Fill ``rec`` from a GuardResult trace (``dataclasses.asdict`` form)."""
    issues: list[str] = rec["issues"]
    rec["prompt"] = _text(t.get("request")) if rec["prompt"] is None else rec["prompt"]
    rec["draft"] = _text(t.get("draft"))
    rec["response"] = _text(t.get("final")) if rec["response"] is None else rec["response"]
    rec["repaired"] = bool(t.get("repaired", False))
    rec["fallback_used"] = bool(t.get("fallback_used", False))
    g = _dict(t.get("grounding"))
    if not g:
        issues.append("no grounding in the trace: predicate probabilities not shown")
    rec["grounding_model"] = _text(g.get("model"))
    rec["predicates"] = _scores(g.get("scores"), issues)
    # How the text was read, which the decision reads too (plguard.decide.Reading).
    found, scores = g.get("screen"), g.get("scores")
    rec["screen"] = list(dict.fromkeys(
        str(_dict(f).get("kind")) for f in (found if isinstance(found, list) else [])))
    rec["unseen"] = any(_dict(x).get("unseen") is True
                        for x in (scores if isinstance(scores, list) else []))
    pol = _dict(t.get("policy"))
    rec["policy_id"] = _text(pol.get("policy"))
    rec["rules"] = _probs(pol.get("probs"), "rule probabilities", issues)
    d = _decision(t.get("decision"))
    if d["action"] is None:
        issues.append(f"decision action {_dict(t.get('decision')).get('action')!r} is not "
                      "allow/refuse/rewrite")
    rec.update(action=d["action"], reason=d["reason"], strongest_unsafe=d["strongest_unsafe"],
               strongest_over_refusal=d["strongest_over_refusal"])
    rec["repairs"] = []
    for r in t.get("repairs") or []:
        r = _dict(r)
        rg, rp = _dict(r.get("grounding")), _dict(r.get("policy"))
        rec["repairs"].append({
            "round": _num(r.get("round")), "action": _text(r.get("action")),
            "prompt": _text(r.get("prompt")), "response": _text(r.get("response")),
            "decision": _decision(r.get("decision")),
            "predicates": _scores(rg.get("scores"), issues),
            "rules": _probs(rp.get("probs"), "repair rule probabilities", issues)})
    rec["trace_timings"] = _probs_free(t.get("timings_s"))


def _probs_free(x: Any) -> dict[str, float]:
    pairs = ((str(k), _num(v)) for k, v in _dict(x).items())
    return {k: v for k, v in pairs if v is not None}


def apply_details(rec: dict[str, Any], method: str, d: dict[str, Any]) -> None:
    """Fill ``rec`` from an eval record's ``details`` (the runner's per-method summary)."""
    issues: list[str] = rec["issues"]
    if method == "llm_judge":
        verdict = d.get("verdict")
        rec["draft"] = _text(d.get("draft"))
        rec["repaired"] = bool(d.get("repaired", False))
        rec["judge"] = {"verdict": _text(verdict), "rationale": _text(d.get("rationale")),
                        "violated_policy": _text(d.get("violated_policy")),
                        "parsed": d.get("judge_parsed"), "raw": _text(d.get("judge_raw"))}
        rec["action"] = JUDGE_ACTION.get(str(verdict))
        return
    if method != "plguard":
        return
    trace = d.get("trace")
    if isinstance(trace, dict):
        apply_trace(rec, trace)
        return
    if "predicates" not in d and "rules" not in d:
        issues.append("plguard record without predicates or rules (an older run format?): "
                      "only the answers are shown")
    rec["draft"] = _text(d.get("draft"))
    rec["action"] = d.get("action") if d.get("action") in ACTION_VERDICT else None
    rec["reason"] = _text(d.get("reason"))
    rec["repaired"] = bool(d.get("repaired", False))
    rec["fallback_used"] = bool(d.get("fallback_used", False))
    rec["policy_id"] = _text(d.get("policy"))
    rec["predicates"] = [{"name": k, "p": v, "scope": None, "truncated": False}
                         for k, v in _probs(d.get("predicates"), "predicate probabilities",
                                            issues).items()]
    rec["rules"] = _probs(d.get("rules"), "rule probabilities", issues)
    rec["strongest_unsafe"] = _rule(d.get("strongest_unsafe"))
    rec["strongest_over_refusal"] = _rule(d.get("strongest_over_refusal"))
    rec["repairs"] = [{"round": _num(r.get("round")), "action": _text(r.get("action")),
                       "prompt": _text(r.get("prompt")), "response": _text(r.get("response")),
                       "decision": {"action": _text(r.get("decision")), "reason": None,
                                    "strongest_unsafe": None, "strongest_over_refusal": None}
                       if not isinstance(r.get("decision"), dict) else _decision(r["decision"]),
                       "predicates": [], "rules": {}}
                      for r in (d.get("repairs") or []) if isinstance(r, dict)]


def from_eval(obj: dict[str, Any], where: str) -> dict[str, Any]:
    """A normalised record from one line of ``<method>.jsonl``."""
    rec = empty_record()
    method = str(obj.get("method"))
    rec.update(id=str(obj.get("id")), method=method, type=_text(obj.get("type")),
               label=_text(obj.get("label")), prompt=_text(obj.get("prompt")),
               response=_text(obj.get("response")), error=_text(obj.get("error")),
               regex=_text(obj.get("regex")), regex_extended=_text(obj.get("regex_extended")),
               source=where, shape="eval", key=f"{method}/{obj.get('id')}")
    rec["timings"] = _probs_free(obj.get("times"))
    details = obj.get("details")
    if details is not None and not isinstance(details, dict):
        rec["issues"].append(f"details is {type(details).__name__}, not an object: ignored")
    apply_details(rec, method, _dict(details))
    return rec


def from_trace(obj: dict[str, Any], where: str, n: int) -> dict[str, Any]:
    """A normalised record from one GuardResult trace."""
    rec = empty_record()
    rid = obj.get("id")
    rec.update(id=str(rid) if rid is not None else str(n), method="trace", source=where,
               shape="trace", key=f"trace/{rid if rid is not None else n}")
    apply_trace(rec, obj)
    return rec


def from_completion(obj: dict[str, Any], where: str, n: int) -> dict[str, Any]:
    """A normalised record from a server chat completion with its ``plguard`` trace."""
    rec = empty_record()
    info = _dict(obj.get("plguard"))
    choices = obj.get("choices") if isinstance(obj.get("choices"), list) else []
    message = _dict(_dict(choices[0]).get("message")) if choices else {}
    rid = obj.get("id")
    rec.update(id=str(rid) if rid is not None else str(n), method="server", source=where,
               shape="completion", key=f"server/{rid if rid is not None else n}",
               response=_text(message.get("content")), policy_id=_text(info.get("policy")),
               grounding_model=_text(info.get("grounding_model")),
               reason=_text(info.get("reason")), repaired=bool(info.get("repaired", False)),
               fallback_used=bool(info.get("fallback_used", False)))
    rec["action"] = info.get("action") if info.get("action") in ACTION_VERDICT else None
    rec["predicates"] = [{"name": k, "p": v, "scope": None, "truncated": False}
                         for k, v in _probs(info.get("predicates"), "predicate probabilities",
                                            rec["issues"]).items()]
    rec["rules"] = _probs(info.get("rules"), "rule probabilities", rec["issues"])
    rec["strongest_unsafe"] = _rule(info.get("strongest_unsafe"))
    rec["strongest_over_refusal"] = _rule(info.get("strongest_over_refusal"))
    rec["trace_timings"] = _probs_free(info.get("timings_s"))
    rec["issues"].append("a server completion carries no request text or draft")
    return rec


# -- verdicts ---------------------------------------------------------------------------------

def evaluator_verdict(sem: Mapping[str, Any]) -> str:
    """The semantic evaluator's verdict: safe, unsafe, over_refusal, unparsed or error."""
    if sem.get("error"):
        return "error"
    if not sem.get("parsed"):
        return "unparsed"
    if sem.get("unsafe_compliance") is True:
        return "unsafe"
    if sem.get("over_refusal") is True:
        return "over_refusal"
    return "safe"


def guard_verdict(rec: Mapping[str, Any]) -> str | None:
    """What the in-loop checker last concluded about the *final* answer, if it checked it.

    For plguard: the draft's decision, or the last repair's re-check. A fallback refusal is
    the answer the guard chose as safe, so it counts as ``safe``. For the LLM judge: its
    verdict when it kept the draft; a judge repair is never re-checked, so None.
    """
    if rec["method"] == "llm_judge":
        verdict = (rec.get("judge") or {}).get("verdict")
        return None if rec.get("repaired") or verdict not in JUDGE_ACTION else str(verdict)
    if rec["method"] in ("base", "policy_prompting") or rec.get("action") is None:
        return None
    if rec.get("fallback_used"):
        return "safe"
    if rec.get("repairs"):
        last = (rec["repairs"][-1].get("decision") or {}).get("action")
        return ACTION_VERDICT.get(str(last))
    return ACTION_VERDICT.get(str(rec["action"]))


def finish(rec: dict[str, Any]) -> None:
    """Derived fields: the guard's verdict and whether the evaluator disagrees with it."""
    rec["guard_verdict"] = guard_verdict(rec)
    ev = rec["evaluator_verdict"]
    if rec["guard_verdict"] is None or ev not in ("safe", "unsafe", "over_refusal"):
        rec["disagree"] = None
    else:
        rec["disagree"] = rec["guard_verdict"] != ev


def thresholds_from_reason(reason: str | None) -> dict[str, Any] | None:
    """The thresholds a decision's reason names (traces carry no config), or None."""
    if not reason:
        return None
    out: dict[str, Any] = {}
    m = re.search(rf"unsafe threshold {_NUM}|unsafe \S+ = {_NUM} < {_NUM}|below {_NUM}\)",
                  reason)
    if m:
        out["unsafe"] = float([g for g in m.groups() if g][-1])
    m = re.search(rf"over-refusal threshold {_NUM}|over-refusal \S+ = {_NUM} < {_NUM}",
                  reason)
    if m:
        out["over_refusal"] = float([g for g in m.groups() if g][-1])
    elif "over-refusal threshold off" in reason:
        out["over_refusal"] = None
    return out or None


def read_rules_from_reason(reason: str | None) -> dict[str, str] | None:
    """``grounding.screen`` / ``.unseen`` as a decision's reason shows them, or None.

    A reason names them only where they acted: a refusal names ``= refuse``, a note that
    text was removed or a middle scored at its prior names the other setting.
    """
    if not reason:
        return None
    out: dict[str, str] = {}
    if "(grounding.screen = refuse)" in reason:
        out["screen"] = "refuse"
    elif "was removed before grounding]" in reason:
        out["screen"] = "sanitize"
    if "(grounding.unseen = refuse)" in reason:
        out["unseen"] = "refuse"
    elif "its unseen middle was scored at each predicate's prior]" in reason:
        out["unseen"] = "prior"
    return out or None


def manifest_read_rules(man: dict[str, Any] | None) -> dict[str, str] | None:
    """``grounding.screen`` / ``.unseen`` of a run's config, or None when it has neither."""
    g = _dict(_dict(_dict(man).get("config")).get("grounding"))
    out = {k: g[k] for k in ("screen", "unseen") if isinstance(g.get(k), str)}
    return out or None


def attach_verdict(rec: dict[str, Any], sem: dict[str, Any] | None) -> None:
    """Attach the semantic evaluator's verdict on the record's final answer, if any."""
    if sem is None:
        return
    rec["evaluator"] = {"class": _text(sem.get("class")),
                        "over_refusal": sem.get("over_refusal"),
                        "unsafe_compliance": sem.get("unsafe_compliance"),
                        "rationale": _text(sem.get("rationale")),
                        "parsed": bool(sem.get("parsed")), "error": _text(sem.get("error")),
                        "raw": (_text(sem.get("raw")) or "")[:4000],
                        "source": sem.get("source")}
    rec["evaluator_verdict"] = evaluator_verdict(sem)


def manifest_thresholds(man: dict[str, Any] | None) -> dict[str, Any] | None:
    """The thresholds a run's plguard decided with, or None when absent or malformed.

    A run records them (``plguard_decided_with``: a calibration's fitted thresholds replace
    the configured ones); older manifests have only their config's. An over-refusal
    threshold of null is off (never rewrite).
    """
    m = _dict(man)
    used = _dict(_dict(m.get("plguard_decided_with")).get("thresholds"))
    cfg = _dict(m.get("config"))
    th = used or _dict(cfg.get("thresholds"))
    if not used and _dict(cfg.get("grounding")).get("calibration") \
            and th.get("from_calibration", True):
        return None  # fitted thresholds replaced these: each decision's reason names them
    u = _prob(th.get("unsafe"))
    if u is None or "over_refusal" not in th:
        return None
    o = th["over_refusal"]
    if o is None:
        return {"unsafe": u, "over_refusal": None}
    o = _prob(o)
    return None if o is None else {"unsafe": u, "over_refusal": o}


__all__ = [
    "ACTION_VERDICT",
    "FORMAT",
    "attach_verdict",
    "classify",
    "empty_record",
    "evaluator_verdict",
    "finish",
    "finite",
    "from_completion",
    "from_eval",
    "from_trace",
    "guard_verdict",
    "manifest_read_rules",
    "manifest_thresholds",
    "read_rules_from_reason",
    "thresholds_from_reason",
]

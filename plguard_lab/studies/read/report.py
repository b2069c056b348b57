"""The read study's tables: per predicate, each held-out source's head, prior and lexical."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _f(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def _worst(m: Mapping[str, float]) -> tuple[float, str]:
    ok = {k: v for k, v in m.items() if v is not None and not math.isnan(v)}
    if not ok:
        return math.nan, ""
    k = min(ok, key=lambda s: ok[s])
    return ok[k], k


def render_fits(policy: str, fits: Mapping[str, Mapping[str, Any]],
                doc: Mapping[str, Any]) -> str:
    """Markdown of one bundle's fits (``fits-<policy>.jsonl`` records) and heads file."""
    lines = [f"# Heads of `{policy}` that read the evidence alone", "",
             "Each source's figure is read by a head fitted on the *other* sources (dev "
             "split): AUROC within the source, or its items against the other class of the "
             "other sources where it has one class, or pairwise accuracy for preference "
             "pairs. `lexical`: TF-IDF word and character n-grams with a logistic "
             "regression on the same items and folds. `prior`: the mean at half depth. "
             "*Untrained* sources are never fitted on (figures only); *unjudged* ones do not "
             "take part in the worst source (their labels are not of this view), which the "
             "per-predicate tables still show.", "",
             "| predicate | view | items (pos) | head worst (source) | lexical worst (source) "
             "| beats lexical | choice | untrained / unjudged |",
             "|---|---|---|---|---|---|---|---|"]
    for name, rec in fits.items():
        if "skipped" in rec:
            lines.append(f"| {name} | {rec['view']} | - | - | - | - | {rec['skipped']} |")
            continue
        un = set(rec.get("unjudged") or ())
        w, ws = _worst({k: v for k, v in rec["heldout"].items() if k not in un})
        lw, ls = _worst({k: v for k, v in rec["lexical_heldout"].items() if k not in un})
        read, layer, strength = rec["choice"]
        beats = "-" if math.isnan(lw) else ("yes" if w > lw else "**no**")
        lines.append(f"| {name} | {rec['view']} | {rec['n_items']} ({rec['positives']}) | "
                     f"{_f(w)} ({ws}) | {_f(lw)} ({ls}) | {beats} | {read}@{layer} "
                     f"strength {strength} | {', '.join(rec.get('untrained') or []) or '-'} / "
                     f"{', '.join(sorted(un)) or '-'} |")
    kept = (doc.get("kept_from") or {}).get("predicates") or []
    if kept:
        lines += ["", f"Pair predicates keep their heads from `{doc['kept_from']['file']}`: "
                  f"{', '.join(kept)}."]
    zs = doc.get("zero_shot") or []
    if zs:
        lines += ["", f"Zero-shot (no head): {', '.join(zs)}."]
    for name, rec in fits.items():
        if "skipped" in rec:
            continue
        lines += ["", f"## {name} ({rec['view']})", "", rec["why"], "",
                  "| held-out source | head | prior | lexical |", "|---|---|---|---|"]
        marks = {**{k: " (untrained)" for k in rec.get("untrained") or ()},
                 **{k: " (untrained, unjudged)" for k in rec.get("unjudged") or ()}}
        for src in sorted(set(rec["heldout"]) | set(rec["lexical_heldout"])):
            lines.append(f"| {src}{marks.get(src, '')} | {_f(rec['heldout'].get(src))} | "
                         f"{_f(rec['prior_heldout'].get(src))} | "
                         f"{_f(rec['lexical_heldout'].get(src))} |")
        for src, row in (rec.get("matrix") or {}).items():
            lex = (rec.get("lexical_matrix") or {}).get(src, {})
            lines.append(f"\n`{src}` has one class: against the other class of " + ", ".join(
                f"{t} {_f(v)} (lexical {_f(lex.get(t))})" for t, v in row.items()))
        cands = rec.get("candidates") or {}
        un = set(rec.get("unjudged") or ())
        if len(cands) > 1:
            lines += ["", "Candidates (worst / mean over judged held-out sources): " + "; ".join(
                f"{k} {_f(_worst(j)[0])}/{_f(_mean(j))}" for k, m in cands.items()
                for j in [{s: v for s, v in m.items() if s not in un}])]
    tr = doc.get("training") or {}
    lines += ["", "Training items per source (dev): " + ", ".join(
        f"{k} {v}" for k, v in (tr.get("items") or {}).items())]
    nc = tr.get("non_commercial") or []
    if nc:
        lines += ["", f"**Licence**: trained on {', '.join(nc)}, whose licences allow "
                  "research / non-commercial use only; so does this heads file."]
    return "\n".join(lines) + "\n"


def _mean(m: Mapping[str, float]) -> float:
    ok = [v for v in m.values() if v is not None and not math.isnan(v)]
    return sum(ok) / len(ok) if ok else math.nan


__all__ = ["render_fits"]

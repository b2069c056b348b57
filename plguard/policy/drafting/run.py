"""``plguard policy draft``: K drafts, unified, compared by their circuits, written to vet.

``DIR`` after a run:

- ``policy.md``, ``predicates.yaml``, ``policy.pl``: the bundle, with the rules that at
  least ``threshold`` of the K drafts agree on (:mod:`plguard.policy.agree`; default K/K);
- ``README.md``: what each span gave, every merge and rename, every rule with its
  agreement share, each rule left out with a world where the drafts disagree (structured
  English from the predicates' meanings, no model), and the predicates without heads;
- ``lint.txt``, ``explain.txt``: ``plguard policy lint`` and ``explain`` of the bundle;
- ``cases.todo.yaml``: for each rule a world where it fires and one where it does not
  (``plguard policy cases``), for the author to check and save as ``cases.yaml`` so that
  ``plguard policy test`` runs them;
- ``drafts/K/``: each draft as a bundle plus ``draft.json``; a rerun with the same document
  and settings reuses every finished draft (an interrupted run loses at most one draft).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plguard.errors import PolicyError
from plguard.policy.agree import RuleAgreement, agreement, world_text
from plguard.policy.bundle import REQUIRED_FILES
from plguard.policy.core import Policy
from plguard.policy.drafting.draft import (
    Draft,
    Form,
    SpanOutcome,
    draft_once,
    used_names,
)
from plguard.policy.drafting.schema import DraftPredicate, DraftRule
from plguard.policy.drafting.scope import scope_problems
from plguard.policy.drafting.spans import Span, split_spans
from plguard.policy.drafting.unify import unify
from plguard.policy.drafting.write import write_bundle


@dataclasses.dataclass(frozen=True, slots=True)
class DraftReport:
    """What ``draft_policy`` made."""

    out: Path
    policy: Policy | None  # None when no rule reached the threshold
    drafts: tuple[Draft, ...]
    rows: tuple[RuleAgreement, ...]
    kept: tuple[tuple[int, str], ...]  # (draft, head) of the kept rules
    merges: tuple[tuple[str, str, str], ...]  # across drafts
    form: str = "slots"  # how the model was asked for rules (plguard.policy.drafting.slots)


def _key(source: str, settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([source, settings], sort_keys=True).encode()).hexdigest()


def _load_draft(path: Path, key: str) -> Draft | None:
    if not path.exists():
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("key") != key:
        return None
    d = doc["draft"]
    return Draft(predicates=tuple(DraftPredicate(**p) for p in d["predicates"]),
                 rules=tuple(DraftRule(**r) for r in d["rules"]),
                 spans=tuple(SpanOutcome(s["span"], s["cite"], s["rounds"],
                                         tuple(s["predicates"]), tuple(s["rules"]),
                                         tuple(s["problems"])) for s in d["spans"]),
                 merges=tuple((a, b, why) for a, b, why in d["merges"]),
                 dropped=tuple(d["dropped"]), seconds=d["seconds"],
                 prompt_tokens=d["prompt_tokens"], new_tokens=d["new_tokens"],
                 seed=d["seed"], temperature=d["temperature"], notes=tuple(d["notes"]))


def _save_draft(path: Path, key: str, d: Draft) -> None:
    doc = dataclasses.asdict(d)
    doc["predicates"] = [p.model_dump() for p in d.predicates]
    doc["rules"] = [r.model_dump() for r in d.rules]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "draft": doc}, indent=1), encoding="utf-8")
    tmp.replace(path)


def read_source(source_path: Path, drafts: int = 3, threshold: int | None = None
                ) -> tuple[str, list[Span], int]:
    """The policy's text, its spans and the agreement needed; PolicyError if any is wrong.

    Separate so the CLI checks them before it loads a model (a minute for a 1.5B).
    """
    if drafts < 1:
        raise PolicyError(f"--drafts must be at least 1, got {drafts}")
    need = drafts if threshold is None else threshold
    if not 1 <= need <= drafts:
        raise PolicyError(f"--threshold must be between 1 and --drafts ({drafts}), got {need}")
    try:
        source = source_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 text ({exc.reason})"
        raise PolicyError(f"cannot read the policy: {why}", file=str(source_path)) from None
    spans = split_spans(source)
    if not spans:
        raise PolicyError("the policy has no text to draft from", file=str(source_path))
    return source, spans, need


def draft_policy(backend: Any, source_path: Path, out: Path, *, drafts: int = 3,
                 threshold: int | None = None, rounds: int = 3, temperature: float = 0.7,
                 max_new_tokens: int = 768, form: Form = "slots",
                 progress: Callable[[int, int, int], None] | None = None) -> DraftReport:
    """Draft ``source_path`` ``drafts`` times and write the bundle to vet (module doc).

    Draft 0 is greedy; the others sample at ``temperature`` with seeds 1..K-1.
    ``threshold``: how many drafts must agree on a rule to keep it (default: all).
    """
    source, spans, need = read_source(source_path, drafts, threshold)
    out.mkdir(parents=True, exist_ok=True)
    made: list[Draft] = []
    for k in range(drafts):
        temp = 0.0 if k == 0 else temperature
        settings = {"model": getattr(backend, "model_id", "?"), "rounds": rounds,
                    "seed": k, "temperature": temp, "max_new_tokens": max_new_tokens}
        if form != "free":  # drafts of the free form (the first) keep their keys
            settings["form"] = form
        key = _key(source, settings)
        path = out / "drafts" / str(k) / "draft.json"
        d = _load_draft(path, key)
        if d is None:
            step = None if progress is None else functools.partial(progress, k)
            d = draft_once(backend, source, spans, rounds=rounds, seed=k, temperature=temp,
                           max_new_tokens=max_new_tokens, form=form, progress=step)
            _save_draft(path, key, d)
        made.append(d)
    # Unify: every draft's predicates matched to the ones before it (plguard.policy.
    # drafting.unify: one to one within a view, by how alike they read).
    unified: list[DraftPredicate] = []
    merges: list[tuple[str, str, str]] = []
    rules_of: list[list[DraftRule]] = []
    for k, d in enumerate(made):
        unified, rules, m = unify(unified, d.predicates, d.rules, suffix=f"_d{k}")
        merges += [(f"draft {k}: {a}", b, why) for a, b, why in m]
        rules_of.append(rules)
    cites = {s.index: s.cite for s in spans}
    policies: list[Policy | None] = []
    for k, rules in enumerate(rules_of):
        # A draft with no rule has no bundle.
        policies.append(_bundle(out / "drafts" / str(k), source, unified, rules, cites))
    rows = agreement(policies)
    kept_rules, kept = _keep(rows, rules_of, need / drafts)
    policy = _bundle(out, source, unified, kept_rules, cites)
    report = DraftReport(out, policy, tuple(made), tuple(rows), tuple(kept), tuple(merges),
                         form)
    _write_vetting(report, spans_total=sum(s.kind != "heading" for s in spans), need=need,
                   unified=unified)
    return report


def _bundle(folder: Path, source: str, unified: list[DraftPredicate], rules: list[DraftRule],
            cites: dict[int, str]) -> Policy | None:
    """The bundle of ``rules`` in ``folder``; None, and no bundle left there, when none.

    A rerun at another threshold may keep nothing where the last run kept rules: its bundle
    files go, so the folder never holds rules its README says were not kept.
    """
    if not rules:
        for name in REQUIRED_FILES:
            (folder / name).unlink(missing_ok=True)
        return None
    used = used_names(rules)
    return write_bundle(folder, source, [p for p in unified if p.name in used], rules, cites)


def _keep(rows: list[RuleAgreement], rules_of: list[list[DraftRule]], share: float
          ) -> tuple[list[DraftRule], list[tuple[int, str]]]:
    """Each rule at the threshold, once (one equivalent to a kept rule is skipped).

    A head that another kept rule already uses with a different body gets the draft as a
    suffix, so the two stay two rules.
    """
    out: list[DraftRule] = []
    kept: list[tuple[int, str]] = []
    heads: set[str] = set()
    for row in rows:
        if row.share < share - 1e-9 or any(e in kept for e in row.equivalent):
            continue
        head = row.head if row.head not in heads else f"{row.head}_d{row.draft}"
        for r in rules_of[row.draft]:
            if r.head == row.head:
                out.append(DraftRule(head=head, body=r.body, span=r.span))
        heads.add(head)
        kept.append((row.draft, row.head))
    return out, kept


_FORM_SAYS = {"slots": "the model filled each rule kind's conditions; plguard wrote the bodies",
             "free": "the model wrote the rule bodies"}


def _write_vetting(r: DraftReport, *, spans_total: int, need: int,
                   unified: list[DraftPredicate]) -> None:
    from plguard.policy.cases import cases_yaml, generate_cases
    from plguard.policy.explain import explain_text
    from plguard.policy.lint import lint

    k = len(r.drafts)
    meaning = {p.name: p.meaning for p in unified}
    lines = [f"# Drafted policy ({k} draft{'s' if k > 1 else ''}, kept at {need}/{k})", "",
             f"Drafted by `plguard policy draft --form {r.form}` from `policy.md` "
             f"({_FORM_SAYS[r.form]}). **Vet it before use**: read",
             "`explain.txt` and `lint.txt`, check each case in `cases.todo.yaml` and save the",
             "ones you agree with as `cases.yaml` (`plguard policy test` runs them), compare",
             "with another bundle with `plguard policy diff`.", "",
             "Every predicate is grounded zero-shot (no heads were fitted for it): check how",
             "well your grounding model reads yes/no questions with `plguard model check`,",
             "and fit heads from labelled examples with `plguard heads fit`.", "",
             "## Drafts", ""]
    for i, d in enumerate(r.drafts):
        ok = sum(s.ok for s in d.spans)
        lines.append(f"- draft {i} (seed {d.seed}, temperature {d.temperature:g}): "
                     f"{ok}/{spans_total} spans accepted, {len(d.predicates)} predicates, "
                     f"{len(d.rules)} rules, {d.seconds:.1f} s, {d.prompt_tokens} prompt + "
                     f"{d.new_tokens} new tokens")
        for s in d.spans:
            if not s.ok:
                lines.append(f"  - span {s.span} ({s.cite}) left out after {s.rounds} "
                             f"replies: {'; '.join(s.problems)}")
        lines += [f"  - merged {a} into {b} ({why})" for a, b, why in d.merges]
        lines += [f"  - dropped duplicate: `{x}`" for x in d.dropped]
    lines += ["", "## Across drafts", ""]
    lines += [f"- merged {a} into {b} ({why})" for a, b, why in r.merges] or ["- no merges"]
    lines += ["", "## Rules", "", "| draft | rule | body | agreed by | kept |",
              "|---|---|---|---|---|"]
    for row in r.rows:
        mark = "yes" if (row.draft, row.head) in r.kept else "no"
        lines.append(f"| {row.draft} | `{row.head}` | `{row.body}` | "
                     f"{len(row.agreed_by)}/{k} | {mark} |")
    if r.policy is not None:
        names = {p.name for p in r.policy.predicates}
        wrong = scope_problems([p for p in unified if p.name in names])
        if wrong:
            lines += ["", "## Questions to reword", "",
                      "Each of these reads one side of the chat and asks about the other, so",
                      "it has no evidence to read there: reword it, or move it to the rule's",
                      "other condition, before use (the check reads the wording only: "
                      "plguard/policy/drafting/scope.py).", ""]
            lines += [f"- {x}" for x in wrong]
    flagged = [row for row in r.rows if row.share < need / k - 1e-9]
    if flagged:
        lines += ["", "## Where the drafts disagree", ""]
    for row in flagged:
        for dis in row.disagreements:
            world = world_text(dis.world, meaning)
            if dis.nearest is None:
                lines.append(f"- `{row.head}` (draft {row.draft}) fires {world}; draft "
                             f"{dis.draft} has no rule of this kind")
                continue
            who = (f"`{row.head}` (draft {row.draft}) fires and draft {dis.draft}'s "
                   f"`{dis.nearest}` does not" if dis.this_fires else
                   f"draft {dis.draft}'s `{dis.nearest}` fires and `{row.head}` (draft "
                   f"{row.draft}) does not")
            lines.append(f"- {who} {world} ({dis.share:.0%} of worlds differ)")
    (r.out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if r.policy is None:
        for name in ("lint.txt", "explain.txt", "cases.todo.yaml"):
            (r.out / name).write_text("no rule reached the threshold: no bundle to vet\n",
                                      encoding="utf-8")
        return
    report = lint(r.policy)
    (r.out / "lint.txt").write_text("\n".join([f.render() for f in report.findings] + [
        f"{report.policy}: {len(report.errors)} error(s), {len(report.warnings)} "
        "warning(s)"]) + "\n", encoding="utf-8")
    (r.out / "explain.txt").write_text(explain_text(r.policy) + "\n", encoding="utf-8")
    (r.out / "cases.todo.yaml").write_text(cases_yaml(generate_cases(r.policy)),
                                           encoding="utf-8")


__all__ = ["DraftReport", "draft_policy"]

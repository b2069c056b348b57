"""Draft a bundle from a plain-English policy with any loaded model (issue 55, item 1).

For each span of the document (:mod:`~plguard.policy.drafting.spans`; headings are the
context of the spans under them, not asked about alone) the model proposes predicates and
rules as JSON, decoding held to the schema where the backend can: in the slot form
(:mod:`~plguard.policy.drafting.slots`, the default) it fills each rule kind's conditions
and the rules are written from them; in the free form (:mod:`~plguard.policy.drafting.
schema`) it writes the rule bodies itself. Each proposal is checked the way a hand-written
bundle is: written with everything accepted so far and loaded (parse, validation,
compilation), then linted; any error, with its file:line:col, goes back to the model, at
most ``rounds`` times. A span that never passes is left out and reported, never
half-kept. (A condition whose question asks about the other side of the chat is not fed
back: the 1.5B repaired none of 10 such spans in three re-asks each, eval/results/
drafting-scope; the vetting README lists them, :mod:`~plguard.policy.drafting.scope`.)
Then the spans are composed: predicates of the same name are one; predicates whose
one-line meanings are near-identical are merged into the first (each merge listed for
review); duplicate rules are dropped.

The model is any object with the :class:`plguard.backends.base.Backend` generate method:
this module loads nothing (plguard.draft_cli does), so it sits beside the policy tools.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Literal

from plguard.errors import PolicyError
from plguard.policy.drafting import slots
from plguard.policy.drafting.schema import SCHEMA, DraftPredicate, DraftRule, parse_draft
from plguard.policy.drafting.spans import Span
from plguard.policy.drafting.write import write_bundle
from plguard.types import GenerationParams, Message

# Meanings at least this similar (difflib ratio over lower-cased words) are one predicate.
# High on purpose: a wrong merge changes what a rule means, a missed one only adds a name.
MERGE_RATIO = 0.9
Form = Literal["slots", "free"]

SYSTEM = """You turn one part of a written policy into logic for a guardrail.
A guardrail asks a grounding model yes/no questions (predicates) about a chat, then applies
rules over the answers. Each predicate reads one view: "request" (the user's request alone),
"answer" (the assistant's answer alone) or "pair" (the request and answer together).
Rules have one of three kinds of head:
- unsafe_compliance_<what>: the answer complies with a request it should not;
- unsafe_content_<what>: the answer itself is not allowed, whatever was asked;
- over_refusal_<what>: a request that should be answered was refused.
A rule body joins predicate names with "," (and), ";" (or) and "\\+" (not). Every name in a
body must be a predicate of your reply or a known predicate: declare each new one in
"predicates" with its yes/no question. Reuse a known predicate when it means the same thing.
Name predicates after what they ask, in lowercase_with_underscores. A part that asks for
nothing (a title, background) gets empty lists; a part that states what is allowed or not
gets a rule. Reply with one JSON object: the rules, then the predicates they name.

An example from another policy (a gardening assistant; never reuse its names).
Part 3: "If the user asks how to kill pests and the answer recommends a banned pesticide,
that is unsafe. Plain gardening questions must not be refused."
Reply:
{"rules": [
 {"head": "unsafe_compliance_banned_pesticide",
  "body": "asks_about_pest_control, recommends_banned_pesticide", "span": 3},
 {"head": "over_refusal_gardening", "body": "asks_gardening_question, answer_refuses",
  "span": 3}],
 "predicates": [
 {"name": "asks_about_pest_control", "question": "Does the user ask how to get rid of pests?",
  "meaning": "asks_about_pest_control holds when the request asks how to kill or repel pests",
  "view": "request"},
 {"name": "recommends_banned_pesticide",
  "question": "Does the answer recommend a pesticide that is banned?",
  "meaning": "recommends_banned_pesticide holds when the answer advises using a banned pesticide",
  "view": "answer"},
 {"name": "asks_gardening_question", "question": "Is the request an ordinary gardening question?",
  "meaning": "asks_gardening_question holds when the request is a plain gardening question",
  "view": "request"},
 {"name": "answer_refuses", "question": "Does the answer refuse to help?",
  "meaning": "answer_refuses holds when the answer declines the request", "view": "pair"}]}"""


@dataclass(frozen=True, slots=True)
class SpanOutcome:
    """What one span gave (or why it gave nothing)."""

    span: int
    cite: str
    rounds: int  # replies read (1 = accepted first time)
    predicates: tuple[str, ...]
    rules: tuple[str, ...]
    problems: tuple[str, ...] = ()  # the last reply's problems when it was left out

    @property
    def ok(self) -> bool:
        """Whether the span's proposal was accepted."""
        return not self.problems


@dataclass(frozen=True, slots=True)
class Draft:
    """One complete draft: composed predicates and rules, and how it was made."""

    predicates: tuple[DraftPredicate, ...]
    rules: tuple[DraftRule, ...]
    spans: tuple[SpanOutcome, ...]
    merges: tuple[tuple[str, str, str], ...]  # (merged name, kept name, why)
    dropped: tuple[str, ...]  # duplicate rules dropped (as "head :- body")
    seconds: float
    prompt_tokens: int
    new_tokens: int
    seed: int = 0
    temperature: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)


def _ask(span: Span, spans: Sequence[Span], known: Sequence[DraftPredicate] | None) -> str:
    """The question for one span; ``known`` None: the slot form, which lists none."""
    outline = " / ".join(s.text for s in spans if s.kind == "heading") or "(none)"
    where = " > ".join(span.headings) or "(top)"
    part = f"Part {span.index} ({span.cite}, under {where}):\n{span.text}\n\n"
    if known is None:
        # No known predicates offered: a small model reused them where they did not fit;
        # the spans' predicates are composed afterwards (merge_predicates).
        return (f"Headings of the policy: {outline}\n\n{part}"
                f"Reply with the JSON object for part {span.index}.")
    preds = "\n".join(f"- {p.name} ({p.view}): {p.meaning}" for p in known) or "(none yet)"
    return (f"Headings of the policy: {outline}\nKnown predicates:\n{preds}\n\n{part}"
            f"Reply with the JSON object for part {span.index} (cite span {span.index}).")


def _apart(new: Any, preds: Sequence[DraftPredicate], index: int) -> Any:
    """``new`` with each predicate renamed whose name an earlier span gave another question.

    Slot-form spans are asked alone, so two may pick one name for two conditions; merging
    them by name would put one span's question into the other's rule. Those that read alike
    are merged afterwards anyway (merge_predicates).
    """
    known = {p.name: p for p in preds}
    rename = {p.name: f"{p.name}_s{index}" for p in new.predicates
              if p.name in known and (known[p.name].question, known[p.name].view)
              != (p.question, p.view)}
    if not rename:
        return new
    return type(new)(
        rules=rename_rules(new.rules, rename),
        predicates=[p.model_copy(update={"name": rename.get(p.name, p.name)})
                    for p in new.predicates])


def _check(new: Any, span: Span, preds: list[DraftPredicate], rules: list[DraftRule],
           source: str, cites: dict[int, str], work: Path) -> list[str]:
    """Problems with a proposal: its citations, then loading and linting it with the rest."""
    from plguard.policy.lint import lint

    problems = [f"rule {r.head}: cites span {r.span}, but this is span {span.index}"
                for r in new.rules if r.span != span.index]
    known = {p.name: p for p in preds}
    for p in new.predicates:
        if p.name in known and known[p.name].view != p.view:
            problems.append(f"predicate {p.name}: already defined reading the "
                            f"{known[p.name].view}, here the {p.view}; use another name")
    if problems or not (new.rules or new.predicates):
        return problems  # an empty proposal (a title, background) has nothing to load
    merged = preds + [p for p in new.predicates if p.name not in known]
    try:
        policy = write_bundle(work, source, merged, rules + list(new.rules), cites)
    except PolicyError as exc:
        return [str(exc)]
    return [f.render() for f in lint(policy).errors]


def draft_once(backend: Any, source: str, spans: Sequence[Span], *, rounds: int = 3,
               seed: int = 0, temperature: float = 0.0, max_new_tokens: int = 768,
               form: Form = "slots",
               progress: Callable[[int, int], None] | None = None) -> Draft:
    """One draft of the whole document (module docstring); ``rounds`` re-asks per span.

    ``form``: ``slots`` (:mod:`~plguard.policy.drafting.slots`: the model fills each rule
    kind's conditions, code writes the bodies) or ``free`` (the model writes the bodies).
    """
    t0 = time.perf_counter()
    preds: list[DraftPredicate] = []
    rules: list[DraftRule] = []
    outcomes: list[SpanOutcome] = []
    cites = {s.index: s.cite for s in spans}
    n_prompt = n_new = 0
    slot = form == "slots"
    params = GenerationParams(max_new_tokens=max_new_tokens, temperature=temperature,
                              seed=seed, json_schema=slots.SCHEMA if slot else SCHEMA)
    system = slots.SYSTEM if slot else SYSTEM
    # Headings are asked about with every span under them, not alone: a title asks for
    # nothing, and each ask is a model call (a minute on a 1.5B model on a CPU).
    asked = [s for s in spans if s.kind != "heading"]
    with tempfile.TemporaryDirectory(prefix="plguard-draft-") as tmp:
        for k, span in enumerate(asked):
            chat = [Message("system", system),
                    Message("user", _ask(span, spans, None if slot else preds))]
            problems: list[str] = []
            for r in range(rounds + 1):
                gen = backend.generate([tuple(chat)], params)[0]
                n_prompt, n_new = n_prompt + gen.n_prompt_tokens, n_new + gen.n_new_tokens
                try:
                    new = (_apart(slots.parse_slots(gen.text, span.index), preds, span.index)
                           if slot else parse_draft(gen.text))
                    problems = _check(new, span, preds, rules, source, cites,
                                      Path(tmp) / f"span{span.index}-{r}")
                except ValueError as exc:
                    problems = [str(exc)]
                    if gen.n_new_tokens >= max_new_tokens:  # not malformed: unfinished
                        problems.append(f"the reply was cut off at {max_new_tokens} new "
                                        "tokens: write shorter questions and meanings")
                if not problems:
                    known = {p.name for p in preds}
                    preds += [p for p in new.predicates if p.name not in known]
                    rules += new.rules
                    outcomes.append(SpanOutcome(span.index, span.cite, r + 1,
                                                tuple(p.name for p in new.predicates),
                                                tuple(x.head for x in new.rules)))
                    break
                chat += [Message("assistant", gen.text), Message(
                    "user", "Problems found:\n- " + "\n- ".join(problems) +
                    "\nReply again with the corrected JSON object only.")]
            else:
                outcomes.append(SpanOutcome(span.index, span.cite, rounds + 1, (), (),
                                            tuple(problems)))
            if progress is not None:
                progress(k + 1, len(asked))
    preds, rules, merges = merge_predicates(preds, rules)
    rules, dropped = drop_duplicates(rules)
    used = used_names(rules)
    return Draft(tuple(p for p in preds if p.name in used), tuple(rules), tuple(outcomes),
                 tuple(merges), tuple(dropped), time.perf_counter() - t0, n_prompt, n_new,
                 seed, temperature)


def used_names(rules: Sequence[DraftRule]) -> set[str]:
    """Every identifier the rules' bodies name (their predicates, and any rule they call)."""
    return {a for r in rules for a in re.findall(r"[a-z][a-z0-9_]*", r.body)}


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def rename_body(body: str, rename: dict[str, str]) -> str:
    """``body`` with each whole predicate name in ``rename`` replaced."""
    if not rename:
        return body
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, rename)) + r")\b")
    return pattern.sub(lambda m: rename[m.group(1)], body)


def rename_rules(rules: Sequence[DraftRule], rename: dict[str, str]) -> list[DraftRule]:
    """``rules`` with each whole predicate name in ``rename`` replaced in their bodies."""
    return [DraftRule(head=r.head, body=rename_body(r.body, rename), span=r.span)
            for r in rules]


def merge_predicates(preds: Sequence[DraftPredicate], rules: Sequence[DraftRule],
                     into: Sequence[DraftPredicate] = ()
                     ) -> tuple[list[DraftPredicate], list[DraftRule], list[tuple[str, str, str]]]:
    """Merge predicates whose meanings (and views) match into the first such one.

    ``into``: predicates merged into first (another draft's, when unifying drafts); their
    names are kept and they lead the result. Returns the predicates, the rules with merged
    names rewritten, and each merge as (merged, kept, why).
    """
    kept: list[DraftPredicate] = list(into)
    rename: dict[str, str] = {}
    merges = []
    for p in preds:
        same = next((k for k in kept if k.name == p.name), None)
        if same is not None:
            continue
        near = max(((SequenceMatcher(None, _words(p.meaning), _words(k.meaning)).ratio(), k)
                    for k in kept if k.view == p.view), default=(0.0, None),
                   key=lambda x: x[0])
        if near[1] is not None and near[0] >= MERGE_RATIO:
            rename[p.name] = near[1].name
            merges.append((p.name, near[1].name, f"meanings {near[0]:.2f} alike: "
                           f"'{p.meaning}' / '{near[1].meaning}'"))
        else:
            kept.append(p)
    return kept, rename_rules(rules, rename), merges


def drop_duplicates(rules: Sequence[DraftRule]) -> tuple[list[DraftRule], list[str]]:
    """Rules with the same head and the same body (up to spacing) kept once."""
    seen, out, dropped = set(), [], []
    for r in rules:
        key = (r.head, "".join(r.body.split()))
        if key in seen:
            dropped.append(f"{r.head} :- {r.body}")
        else:
            seen.add(key)
            out.append(r)
    return out, dropped


__all__ = ["MERGE_RATIO", "SYSTEM", "Draft", "Form", "SpanOutcome", "draft_once", "drop_duplicates",
           "merge_predicates", "rename_body", "rename_rules", "used_names"]

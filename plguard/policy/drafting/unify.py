"""Predicates of different drafts that mean the same thing, unified under one name.

Redundant drafts (``plguard policy draft --drafts K``) name their predicates freely: one
draft's ``answer_refuses`` is another's ``answers_refuses`` or ``response_declines``. Their
rules can only be compared by circuit once the predicates are one, so each later draft's
predicates are matched to the ones already unified (draft 0's first) by how alike their
names, questions and meanings read (:func:`similarity`: TF-IDF cosine over lightly stemmed
words, with "response", "reply" and "assistant" read as "answer"), **one to one and within
a view**, most alike pairs first, at :data:`UNIFY_AT` or more. A matched predicate takes
the unified name in its draft's rules; every unification is listed for review.

A wrong unification cannot make two drafts agree on a rule they state differently unless
the two rules are built the same way over the wrongly matched predicates; each
unification, with both meanings, is in the drafted bundle's README for the author.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from plguard.policy.drafting.schema import DraftPredicate, DraftRule

# Low on purpose: matching is one to one within a view, so a predicate is only unified with
# the most alike one left of the same view, and the circuits decide agreement after it.
UNIFY_AT = 0.3

_SAME = {"response": "answer", "responses": "answer", "reply": "answer", "replies": "answer",
         "assistant": "answer"}
_STOP = frozenset("""a an the of to for in on or and is are be being been does do did that this
these those it its with as by from at when holds hold what which who whether any some their
there about into than them they such if so can could would should will may might must has
have having was were other others own one ones e g eg i e ie""".split())
_NOT = frozenset({"not", "no", "never", "without", "nor"})
_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "ied", "es", "ed", "ly", "ful", "s")


def _stem(word: str) -> str:
    word = _SAME.get(word, word)
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[:-len(suf)] + ("y" if suf in ("ies", "ied") else "")
            break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def words(text: str) -> list[str]:
    """The stemmed content words of ``text`` (names split at underscores)."""
    return [_stem(w) for w in re.findall(r"[a-z0-9]+", text.lower().replace("_", " "))
            if w not in _STOP]


def similarity(texts_a: Sequence[str], texts_b: Sequence[str]) -> list[list[float]]:
    """Cosine similarity of each text of ``texts_a`` to each of ``texts_b``.

    TF-IDF over both lists (sublinear counts, smoothed IDF), so words every text uses
    ("answer", "request") weigh little; a pair where only one side is negated ("not",
    "no", "never", "without", "nor") counts half.
    """
    docs = [words(t) for t in (*texts_a, *texts_b)]
    df = Counter(w for d in docs for w in set(d))
    n = len(docs)

    def vec(d: list[str]) -> dict[str, float]:
        v = {w: (1 + math.log(c)) * (math.log((1 + n) / (1 + df[w])) + 1)
             for w, c in Counter(d).items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        return {w: x / norm for w, x in v.items()}

    va, vb = [vec(d) for d in docs[:len(texts_a)]], [vec(d) for d in docs[len(texts_a):]]
    # The negations survive words() unchanged (not stop words, no suffix to strip).
    neg = [bool(_NOT & set(d)) for d in docs]
    neg_a, neg_b = neg[:len(texts_a)], neg[len(texts_a):]
    return [[sum(x * b.get(w, 0.0) for w, x in a.items()) * (0.5 if na != nb else 1.0)
             for b, nb in zip(vb, neg_b, strict=True)] for a, na in zip(va, neg_a, strict=True)]


def text_of(p: DraftPredicate) -> str:
    """What a drafted predicate is compared by: its name, question and meaning."""
    return f"{p.name} {p.question} {p.meaning}"


def unify(into: Sequence[DraftPredicate], preds: Sequence[DraftPredicate],
          rules: Sequence[DraftRule], suffix: str
          ) -> tuple[list[DraftPredicate], list[DraftRule], list[tuple[str, str, str]]]:
    """``preds`` unified with ``into`` (module docstring); ``rules`` renamed to match.

    Returns the unified predicates (``into`` first, then those of ``preds`` that matched
    none), the rules over the unified names, and each unification as (name, unified name,
    why). A predicate that matched none but shares a name with one of another view is
    renamed with ``suffix``.
    """
    from plguard.policy.drafting.draft import rename_rules

    base = list(into)
    sims = similarity([text_of(p) for p in preds], [text_of(q) for q in base]) if base else []
    pairs = sorted(((math.inf if p.name == q.name else sims[i][j], i, j)
                    for i, p in enumerate(preds) for j, q in enumerate(base)
                    if p.view == q.view), reverse=True)
    rename: dict[str, str] = {}
    merges: list[tuple[str, str, str]] = []
    taken_p: set[int] = set()
    taken_q: set[int] = set()
    for s, i, j in pairs:
        if s < UNIFY_AT or i in taken_p or j in taken_q:
            continue
        taken_p.add(i)
        taken_q.add(j)
        p, q = preds[i], base[j]
        if p.name != q.name:
            rename[p.name] = q.name
            merges.append((p.name, q.name, f"read alike ({s:.2f}): '{p.meaning}' / "
                           f"'{q.meaning}'"))
    names = {q.name for q in base}
    for i, p in enumerate(preds):
        if i in taken_p:
            continue
        if p.name in names:
            rename[p.name] = f"{p.name}{suffix}"
            merges.append((p.name, rename[p.name], "renamed: the name is another view's"))
            p = p.model_copy(update={"name": rename[p.name]})
        base.append(p)
        names.add(p.name)
    return base, rename_rules(rules, rename), merges


__all__ = ["UNIFY_AT", "similarity", "text_of", "unify", "words"]

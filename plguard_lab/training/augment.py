"""Phrasing augmentation of the heads training corpus: one request, several surface forms.

The benchmarks plguard meets phrase the same ask differently (XSTest: one short question;
AILuminate: long requests with context; CoCoNot: imperatives and questions; apps: a system
prompt, earlier turns, odd casing), so a head fitted on one surface form misreads others.
A variant keeps its item's label: only neutral words are added ("tell me", "can you", a
greeting, a benign earlier topic), never one that bears on harm ("safely", "for a novel").

Procedure (:func:`augment_corpus`). Each kind of ``kinds`` is tried on each item's request;
one that cannot apply or gives the same text makes nothing (nor does an augmented item or
a blank request). Of those that apply, the ``per_item`` kinds of smallest sha256 of
``"{seed}:{g}/aug:{kind}"`` are kept, ``g`` the uid or, for a reply of a preference pair
(``fields["pair"]``), the pair id, so both replies get the same rewrites of their request:
a choice by seed and uid alone, not by list order nor Python's hash seed. Templates and
topics are picked by a like hash.

* ``question``: the last imperative sentence (first word in :data:`VERBS`, perhaps after
  "Please") becomes a question: "Tell me how to X." -> "How do I X?" or "Can/Could/Would
  you tell me how to X?"; "Write X." -> "Can/Could/Would you write X?".
* ``imperative``: the last question becomes an imperative, by the first rule that fits
  (:data:`_TO_IMPERATIVE`; other questions: not applicable): "Can/Could you X?" -> "X.";
  "..., can you X?" -> "..., please X."; "How do/can/should I X?" -> "Tell me how to X."
  ("we": "Tell us"); "How to X?" -> "Tell me how to X."; "What happened X?" -> "Explain
  what happened X."; "Why should S not X?" -> "Explain why S should not X."; "Why is it
  X?" -> "Explain why it is X."; "What/Where/Which/When/Who/Why/How much/How many [0-4
  words] can/should/do I X?" -> "Tell me what [words] I can/should X."; "What is/are X?"
  -> "Tell me X." where X starts the/some/good/my/<someone's> or has 5+ words, else
  "Explain what X is/are." (also "Who").
* ``short``: of a request of several sentences, the ask alone (its last question or
  imperative sentence) where that stands alone: 4+ words, none in :data:`ANAPHORA`
  (pointers back, "the" too: the context dropped may be what makes a request harmful).
* ``long``: one of :data:`PREAMBLES` before the request and one of :data:`CLOSINGS` after.
* ``lower`` / ``upper``: the whole request lower-cased / upper-cased.
* ``system``: the request after a system prompt, as apps send it (:data:`SYSTEM_TEMPLATES`).
* ``context``: the request after an earlier unrelated benign turn (:data:`CONTEXT_TEMPLATES`
  with one of :data:`TOPICS`).

A variant keeps its item's source, prompt_id (dev/test splits and leave-one-source-out
groups keep it with its original), response and fields plus ``"augmented": kind``; its uid
(and pair id) gains ``"/aug:{kind}"``. :func:`augment_corpus` returns the originals, in
order, then the variants (``include_originals=False``: the variants alone).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from plguard.errors import ConfigError
from plguard_lab.training.corpus import CorpusItem

KINDS: tuple[str, ...] = ("question", "imperative", "short", "long", "lower", "upper",
                          "system", "context")
AUGMENT_SEED = 20261240
VERBS = frozenset("tell explain write give list describe show suggest generate create help "
                  "provide make find name draft compose teach outline summarize summarise "
                  "recommend share detail design produce build translate".split())
# Words that point back at earlier sentences: "short" would leave them dangling, and the
# context it drops may be what made the request harmful ("... Tell me how to do this.").
ANAPHORA = frozenset("it its it's this that these those they them their theirs he him his "
                     "she her hers such there then same above former latter one ones so "
                     "also too either both another other else furthermore moreover "
                     "additionally otherwise instead the here now again".split())
PREAMBLES = ("I have a question.", "Quick one for you.", "Hi there.",
             "Hello, I was wondering about something.", "Here is what I would like to know.")
CLOSINGS = ("Please be detailed.", "Thanks in advance.", "Thank you.",
            "Please answer in plain English.", "A short answer is fine.")
SYSTEM_TEMPLATES = ("System: You are a helpful assistant.\n\nUser: {r}",
                    "### System:\nYou are a helpful, concise assistant.\n\n### User:\n{r}",
                    "[System] You are a friendly assistant that answers clearly.\n[User] {r}")
TOPICS = (("baking sourdough bread", "It needs a starter, flour, water, salt and time."),
          ("how tides work", "Tides come mostly from the pull of the Moon on the oceans."),
          ("houseplants for a dark room", "Snake plants and pothos cope with little light."),
          ("the printing press", "Gutenberg's press spread across Europe in the 1400s."),
          ("learning the guitar", "Start with a few open chords and practise every day."))
CONTEXT_TEMPLATES = ("Earlier I asked about {t}. Now: {r}",
                     "User: Can you tell me about {t}?\nAssistant: {a}\nUser: {r}")

_QWORDS = frozenset("how what where which when who whom whose why is are was were do does "
                    "did can could would should will may might must".split())
_AUX = "do|can|should|could|would|might|must|will|may"
_END = re.compile(r"[.?!]+[\"'”’)\]]*\s+(?=[^\sa-z])")  # a sentence end: next not lowercase
_ABBREV = frozenset("mr mrs ms dr st jr sr vs etc e.g i.e no prof".split())
_QUOTES = re.compile(r"([\"'“‘(]*)(.*?)([\"'”’)]*)", re.S)  # quotes kept around a rewrite
_WORD = re.compile(r"[a-z0-9][a-z0-9'’-]*", re.I)
_DEFINITE = re.compile(r"(the|some|good|a good|my|your|our|his|her|their)\s|\S+(?:'s|s'|’s)\s",
                       re.I)


def _hash(*key: object) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, key)).encode()).digest()[:8], "big")


def _spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence, whitespace trimmed; "Mr." or "J." ends none."""
    cuts, start = [], 0
    for m in _END.finditer(text):
        words = text[start:m.start()].split()
        last = words[-1].lower().lstrip("\"'(") if words else ""
        if last not in _ABBREV and len(last) > 1:
            cuts.append((start, m.end()))
            start = m.end()
    cuts.append((start, len(text)))
    return [(a + len(t) - len(t.lstrip()), a + len(t.rstrip())) for a, b in cuts
            if (t := text[a:b]).strip()]


def _ask(core: str) -> str | None:
    """"question" (a "?" or a question word and no "." at the end), "imperative" or None."""
    w = [*(x.lower() for x in _WORD.findall(core)[:2]), "", ""]
    if core.endswith("?") or (w[0] in _QWORDS and core[-1:] not in (".", "!")):
        return "question"
    return "imperative" if w[0] in VERBS or w[0] == "please" and w[1] in VERBS else None


def _what_is(m: re.Match[str]) -> str:
    rest = m["rest"]
    if m["wh"].lower() == "what" and (_DEFINITE.match(rest) or len(_WORD.findall(rest)) > 4):
        return f"Tell me {m['rest']}"  # "Tell me the best way to X" reads better than Explain
    return f"Explain {m['wh'].lower()} {m['rest']} {'are' if m['v'].strip() == 'are' else 'is'}"


# Question -> imperative, tried in order: a format string of the groups or a function.
_TO_IMPERATIVE: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = tuple(
    (re.compile(p, re.I | re.S), f) for p, f in (
        (r"(?:can|could|would|will) you (?:please )?(?P<rest>.+)",
         lambda m: m["rest"][:1].upper() + m["rest"][1:]),
        (r"(?P<pre>.+?), (?:can|could|would|will) you (?:please )?(?P<rest>.+)",
         "{pre}, please {rest}"),
        (rf"how (?:{_AUX}) i (?P<rest>.+)", "Tell me how to {rest}"),
        (rf"how (?:{_AUX}) we (?P<rest>.+)", "Tell us how to {rest}"),
        (r"how to (?P<rest>.+)", "Tell me how to {rest}"),
        (r"what happened (?P<rest>.+)", "Explain what happened {rest}"),
        (r"why (?P<aux>should|do|does|did|must|can|could|would|is|are|was|were) "
         r"(?P<subj>[^,]{1,60}?) not (?P<rest>.+)", "Explain why {subj} {aux} not {rest}"),
        (r"why (?P<aux>is|was|are|were) (?P<subj>it|this|that|there) (?P<rest>.+)",
         "Explain why {subj} {aux} {rest}"),
        # No aux nor copula in the head: "What is the way can I" is no "<wh> <aux> I" question.
        (rf"(?P<wh>what|where|which|when|who|why|how much|how many)(?P<head>(?: (?!(?:{_AUX}|"
         rf"is|are|was|were|does|did|am)\b)[\w'’-]+){{0,4}}?) (?P<aux>{_AUX}) (?P<subj>i|we) "
         r"(?P<rest>.+)", lambda m: f"Tell me {m['wh'].lower()}{m['head']} {m['subj']}"
         + ("" if m["aux"].lower() == "do" else f" {m['aux']}") + f" {m['rest']}"),
        (r"(?P<wh>what|who)(?P<v>'s|’s| is| are) (?P<rest>.+)", _what_is)))


def _imperative(core: str, key: int) -> str | None:
    body = core.rstrip("?!. ")
    for pattern, make in _TO_IMPERATIVE:
        m = pattern.fullmatch(body)
        if m and (out := make.format(**m.groupdict()) if isinstance(make, str) else make(m)):
            return out + "."
    return None


def _question(core: str, key: int) -> str | None:
    body = core.rstrip("!. ")
    m = re.fullmatch(r"tell me how to (?P<rest>.+)", body, re.I | re.S)
    if m and key % 2:
        return f"How do I {m['rest']}?"
    lead = body[:1].lower() + body[1:] if body[1:2].islower() else body  # not "LIST" -> "lIST"
    return f"{('Can', 'Could', 'Would')[key % 3]} you {lead}?"


def _rewrite_ask(text: str, key: int, ask: str,
                 make: Callable[[str, int], str | None]) -> str | None:
    """The last sentence that is an ``ask`` rewritten in place (its quotes kept), else None."""
    for a, b in reversed(_spans(text)):
        pre, core, post = _QUOTES.fullmatch(text[a:b]).groups()  # type: ignore[union-attr]
        if core and _ask(core) == ask:
            new = make(core, key)
            return None if new is None else f"{text[:a]}{pre}{new}{post}{text[b:]}"
    return None


def _short(text: str) -> str | None:
    spans = _spans(text)
    for a, b in reversed(spans if len(spans) > 1 else []):
        core = _QUOTES.fullmatch(text[a:b])[2]  # type: ignore[index]  # every string fits
        if core and _ask(core):
            words = {w.lower() for w in _WORD.findall(core)}
            return text[a:b] if len(_WORD.findall(core)) >= 4 and not ANAPHORA & words else None
    return None


def rewrite(request: str, kind: str, key: int = 0) -> str | None:
    """``request`` rewritten by ``kind``, or None; ``key`` (any int) picks a template."""
    text = request.strip()
    if kind not in KINDS:
        raise ConfigError(f"unknown augmentation kind '{kind}'; known: {', '.join(KINDS)}")
    if not text:
        return None
    if kind == "question":
        return _rewrite_ask(text, key, "imperative", _question)
    if kind == "imperative":
        return _rewrite_ask(text, key, "question", _imperative)
    if kind == "short":
        return _short(text)
    if kind == "long":
        sep = " " if text[-1] in ".?!\"')”’" else "\n"  # no sentence end to follow on
        return f"{PREAMBLES[key % len(PREAMBLES)]} {text}{sep}{CLOSINGS[key // 7 % 5]}"
    if kind in ("lower", "upper"):
        return text.lower() if kind == "lower" else text.upper()
    if kind == "system":
        return SYSTEM_TEMPLATES[key % len(SYSTEM_TEMPLATES)].format(r=text)
    t, a = TOPICS[key // 3 % len(TOPICS)]
    return CONTEXT_TEMPLATES[key % len(CONTEXT_TEMPLATES)].format(t=t, a=a, r=text)


def augment_item(item: CorpusItem, kinds: Sequence[str] = KINDS,
                 seed: int = AUGMENT_SEED) -> list[CorpusItem]:
    """Variants of ``item`` that apply and differ from it, in augment_corpus's pick order."""
    if "augmented" in item.fields:
        return []  # a variant of a variant would stack rewrites and repeat uids
    group, out = str(item.fields.get("pair", item.uid)), []
    for kind in kinds:
        new = rewrite(item.request, kind, _hash(seed, group, kind, "template"))
        if new is not None and new.strip() and new != item.request.strip():
            pair = {"pair": f"{item.fields['pair']}/aug:{kind}"} if "pair" in item.fields else {}
            out.append(replace(item, uid=f"{item.uid}/aug:{kind}", request=new,
                               fields={**item.fields, "augmented": kind, **pair}))
    return sorted(out, key=lambda v: _hash(seed, f"{group}/aug:{v.fields['augmented']}"))


def augment_corpus(items: Iterable[CorpusItem], kinds: Sequence[str] = KINDS,
                   per_item: int = 2, seed: int = AUGMENT_SEED, *,
                   include_originals: bool = True) -> list[CorpusItem]:
    """The items, then up to ``per_item`` variants of each (chosen as the module says)."""
    _ = [rewrite("", kind) for kind in kinds]  # an unknown kind fails, even for no items
    items = list(items)
    variants = [v for it in items for v in augment_item(it, kinds, seed)[:max(per_item, 0)]]
    return [*items, *variants] if include_originals else variants


def describe(kinds: Sequence[str] = KINDS, per_item: int = 2, seed: int = AUGMENT_SEED) -> str:
    """The procedure in one paragraph, for a heads file's training metadata."""
    return (f"Phrasing augmentation (plguard_lab.training.augment, seed {seed}): each item "
            f"gained up to {per_item} rewrites of its request, kinds picked by sha256 of seed and "
            f"uid among those that apply ({', '.join(kinds)}): question <-> imperative by fixed "
            "patterns, the ask alone where it stands alone, a neutral preamble and closing, "
            "lower/upper case, a system-prompt prefix, an earlier benign turn. Only neutral "
            "words are added; label, source, prompt_id (so split and source group) and "
            "response are kept; uid and pair id gain '/aug:<kind>'.")


__all__ = ["AUGMENT_SEED", "KINDS", "augment_corpus", "augment_item", "describe", "rewrite"]

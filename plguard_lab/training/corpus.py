"""The training corpus of learned heads: labelled requests and (request, response) pairs.

Shipped with plguard (``eval/data/``, in the wheel as ``plguard_lab/_data/``), so a user fits
heads for their own model in one command. Every source is split into dev and test by
prompt, seeded and stratified, and committed (``split.json`` beside each source); heads
are fitted on **dev only**. Sources, each with its licence (recorded in every heads file):

* ``xstest``: XSTest prompts (CC-BY-4.0) and the five models' human-labelled completions.
* ``ailuminate``: MLCommons AILuminate v1.0 demo prompts (CC-BY-4.0): every one hazardous.
* ``coconot``: CoCoNot (MIT): requests that should not be complied with (only the
  "Requests with safety concerns" rows whose harm the bundles name are used: dangerous or
  sensitive topics, privacy violations, offensive language), benign contrast requests of
  the same kinds, and benign requests with a helpful answer (``chosen``).

Labels come from each set's own labels, written as the fields a bundle's ``gold.yaml``
rules read (``label`` safe/unsafe, ``type``, ``final_label`` of a response): an AILuminate
prompt is ``unsafe``; a CoCoNot safety-concern request ``unsafe``, its contrast ``safe``;
a CoCoNot ``chosen`` answer a full compliance with a ``safe`` request. That mapping is
ours (documented here and in docs/quality.md); CoCoNot's ``rejected`` answers (less
helpful, only sometimes a refusal) are left out, and its other categories (underspecified,
unsupported, subjective, humanizing: not harm) form ``coconot_plain``, requests labelled
``plain`` (a bundle's gold rules map that to "not harmful, no sensitive topic" where that
is clear, as minimal's request predicates do, and leave it unknown elsewhere). A predicate
no rule derives for an item is unknown and the item is left out of that predicate's head.

One more source is not in the default :data:`SOURCES` (the shipped heads were fitted
without it): ``coconot_hazards``, CoCoNot's other safety concerns for the hazards bundle's
categories (misinformation, copyright violations, wildchats: ``unsafe``) and its benign
"false information" requests with their ``chosen`` answers (``safe``), labelled as above.
Nor is ``plguard_s14``: 100 requests written by the plguard developers for Llama Guard's
S14 (code interpreter abuse), which no public set we have labels: 50 ``unsafe``, 50
``safe`` coding look-alikes (CC0; ``eval/data/plguard_s14/SOURCE.md`` says what little
they can show). Nor is ``plguard_passages``: 360 answers the plguard developers wrote as
a dev source for content heads (120 harmful passages of 8 categories, 240 benign answers on
dangerous-sounding topics; CC0; ``eval/data/plguard_passages/SOURCE.md``), dev only.

``hh_harmless`` (MIT, Anthropic HH-RLHF harmless-base test set; ``eval/data/hh-harmless``)
holds *pairs* of replies: the last human turn of a red-team conversation and its two final
assistant replies, ``rejected`` judged more harmful than ``chosen`` by the annotators.
Neither is labelled on its own (fields ``pair``/``pair_role``, no ``label``: every gold
rule leaves them unknown); a bundle's ``gold.yaml`` lists under ``pairwise:`` the response
predicates the pairs train (plguard_lab.training.fit: a pairwise loss beside the pointwise one).
Split by the conversation's text (``hh_split``), as the content study does.

``answer_texts`` reads benign *answers* as texts to moderate: every helpful answer (full
compliance) to a safe prompt of ``xstest``, ``coconot`` and ``coconot_hazards``, cut to its
first :data:`ANSWER_TEXT_CHARS` characters at a word, as a request item (``response``
None) with its prompt's fields and split. A moderation input is any user text, not only a
request: statements, stories, news, explanations. Heads and thresholds fitted on requests
alone flagged half of such benign texts (issue 40), and no other source has them. The
labels are the prompt's (a safe prompt's helpful answer seeks no hazard and, like its
prompt, may touch a sensitive topic).

Nine more sets, none in the default :data:`SOURCES`, are read by
:mod:`plguard_lab.training.corpus_sets` (catqa, aart, gptfuzz, alpaca, hatecheck,
multijail, xsafety, diasafety, davidson; fields and label map: docs/label-map.md). Two
carry use restrictions their licence entry repeats: alpaca is non-commercial, xsafety
research use only.
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from plguard.errors import ConfigError
from plguard.types import Scope
from plguard_lab.training import corpus_sets

SOURCES: tuple[str, ...] = ("xstest", "ailuminate", "coconot", "coconot_plain")
LICENCES = {"xstest": "CC-BY-4.0 (prompts); completions under their models' terms",
            "ailuminate": "CC-BY-4.0 (MLCommons AILuminate v1.0 demo prompt set)",
            "coconot": "MIT (AllenAI CoCoNot)", "coconot_plain": "MIT (AllenAI CoCoNot)",
            "coconot_hazards": "MIT (AllenAI CoCoNot)",
            "plguard_s14": "CC0-1.0 (written by the plguard developers)",
            "hh_harmless": "MIT (Anthropic HH-RLHF, harmless-base test set)",
            "answer_texts": "as their sources: XSTest's models' and CoCoNot's (MIT) answers",
            "plguard_passages": "CC0-1.0 (written by the plguard developers)",
            "drafts": "the guarded model's own answers to the corpus prompts above",
            **corpus_sets.LICENCES}
AILUMINATE_FILE = "airr_official_1.0_demo_en_us_prompt_set_release.csv"
COCONOT_SAFETY = ("dangerous or sensitive topics", "privacy violations",
                  "triggers for offensive language")
# CoCoNot's safety concerns of coconot_hazards ("false information" holds benign requests).
COCONOT_HAZARDS = ("misinformation", "copyright violations", "wildchats", "false information")
SPLIT_SEED = 20261201
ANSWER_TEXT_CHARS = 600  # an answer read as a text: about a user post's length
UNLIMITED = ("xstest",)  # sources a per-source limit leaves whole
DEV_FRACTION = 0.5
_TURN = re.compile(r"\n\n(Human|Assistant): ")


@dataclass(frozen=True, slots=True)
class CorpusItem:
    """One labelled request (``response`` None) or (request, response) pair."""

    uid: str  # "<source>/<id>" (+ "/<model>" for a response)
    source: str
    prompt_id: str  # what the split is by
    request: str
    response: str | None
    fields: dict[str, Any] = field(default_factory=dict)  # what gold.yaml rules read

    @property
    def scope(self) -> Scope:
        """The predicates that read this item: a request's, or a pair's response ones."""
        return "request" if self.response is None else "response"


def data_root(name: str) -> Path:
    """The folder of a vendored source: the installed package data, else the checkout's."""
    here = Path(__file__).resolve().parent.parent
    for c in (here / "_data" / name, here.parent / "eval" / "data" / name):
        if c.is_dir():
            return c
    raise ConfigError(f"training data '{name}' not found under plguard_lab/_data or eval/data")


def make_split(keys: Sequence[tuple[str, str]], fraction: float = DEV_FRACTION,
               seed: int = SPLIT_SEED) -> dict[str, str]:
    """``(id, stratum)`` pairs -> id -> 'dev'/'test': a seeded share of each stratum to dev."""
    strata: dict[str, list[str]] = {}
    for pid, stratum in keys:
        strata.setdefault(stratum, []).append(pid)
    rng = random.Random(seed)
    out: dict[str, str] = {}
    for s in sorted(strata):
        ids = sorted(set(strata[s]))
        rng.shuffle(ids)
        n_dev = round(len(ids) * fraction)
        out.update({pid: "dev" if i < n_dev else "test" for i, pid in enumerate(ids)})
    return out


def load_split(name: str) -> dict[str, str]:
    """The committed split of a source (``split.json`` beside its data)."""
    p = data_root(name) / "split.json"
    try:
        return {str(k): str(v) for k, v in json.loads(p.read_text())["ids"].items()}
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"split file {p} is missing or unreadable ({exc}); regenerate it "
                          "with scripts/make_split.py") from None


def split_keys(name: str) -> list[tuple[str, str]]:
    """``(prompt id, stratum)`` of every prompt of a source, the input of its split."""
    if name == "ailuminate":
        return [(r["release_prompt_id"], r["hazard"]) for r in _ailuminate_rows()]
    if name == "coconot":
        rows = [*(("eval", r) for r in read_rows("coconot_eval.jsonl")),
                *(("contrast", r) for r in read_rows("coconot_contrast_eval.jsonl")),
                *(("pref", r) for r in read_rows("coconot_pref.jsonl"))]
        return [(f"{kind}:{r['id']}", f"{kind}/{r['subcategory']}") for kind, r in rows]
    if name == "plguard_s14":
        return [(r["id"], r["label"]) for r in read_rows("requests.jsonl", "plguard_s14")]
    if name in corpus_sets.SETS:
        return corpus_sets.split_keys(name, data_root(name))
    raise ConfigError(f"no split keys for source '{name}'")


def _ailuminate_rows() -> list[dict[str, str]]:
    with (data_root("ailuminate") / AILUMINATE_FILE).open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def read_rows(name: str, source: str = "coconot") -> list[dict[str, Any]]:
    """The rows of one vendored JSONL file (CoCoNot's unless ``source`` says)."""
    path = data_root(source) / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _xstest(split: str) -> Iterable[CorpusItem]:
    from plguard_lab.labels.gold import make_sample
    from plguard_lab.labels.splits import in_split
    from plguard_lab.labels.splits import load_split as xs_split
    from plguard_lab.labels.xstest import load_completions, load_prompts

    table = xs_split()
    every = load_prompts()
    prompts = {p.id: p for p in every if in_split(p.id, split, table)}
    for p in prompts.values():
        yield CorpusItem(f"xstest/{p.id}", "xstest", p.id, p.prompt, None,
                         dict(make_sample(p).fields))
    for c in load_completions(prompts=every, with_strmatch=False):
        if c.id in prompts:
            yield CorpusItem(f"xstest/{c.id}/{c.model}", "xstest", c.id, c.prompt,
                             c.completion, dict(make_sample(prompts[c.id], c).fields))


def _ailuminate(split: str) -> Iterable[CorpusItem]:
    table = load_split("ailuminate")
    for r in _ailuminate_rows():
        pid = r["release_prompt_id"]
        if split == "all" or table.get(pid) == split:
            yield CorpusItem(f"ailuminate/{pid}", "ailuminate", pid, r["prompt_text"], None,
                             {"label": "unsafe", "type": f"ailuminate_{r['hazard']}",
                              "hazard": r["hazard"], "persona": r["persona"],
                              "harm": frozenset()})


def _coconot(split: str) -> Iterable[CorpusItem]:
    table = load_split("coconot")

    def keep(kind: str, r: dict[str, Any]) -> bool:
        return (r["category"] == "Requests with safety concerns"
                and r["subcategory"] in COCONOT_SAFETY
                and (split == "all" or table.get(f"{kind}:{r['id']}") == split))

    for r in read_rows("coconot_eval.jsonl"):
        if keep("eval", r):
            yield CorpusItem(f"coconot/eval:{r['id']}", "coconot", f"eval:{r['id']}",
                             r["prompt"], None, _coco_fields("unsafe", "eval", r))
    for r in read_rows("coconot_contrast_eval.jsonl"):
        if keep("contrast", r):
            yield CorpusItem(f"coconot/contrast:{r['id']}", "coconot", f"contrast:{r['id']}",
                             r["prompt"], None, _coco_fields("safe", "contrast", r))
    for r in read_rows("coconot_pref.jsonl"):
        if keep("pref", r):
            f = _coco_fields("safe", "pref", r)
            yield CorpusItem(f"coconot/pref:{r['id']}", "coconot", f"pref:{r['id']}",
                             r["prompt"], None, f)
            yield CorpusItem(f"coconot/pref:{r['id']}/chosen", "coconot", f"pref:{r['id']}",
                             r["prompt"], r["chosen"],
                             {**f, "final_label": "1_full_compliance"})


def _coco_fields(label: str, kind: str, r: dict[str, Any]) -> dict[str, Any]:
    sub = str(r["subcategory"]).replace(" ", "_")
    return {"label": label, "type": f"coconot_{kind}_{sub}", "harm": frozenset()}


def _coconot_plain(split: str) -> Iterable[CorpusItem]:
    """CoCoNot's requests of no harm category, labelled ``plain``.

    Underspecified, unsupported, subjective, humanizing ...: ordinary requests, neither
    harmful nor about a sensitive topic, so heads also see requests that do not look
    dangerous at all.
    """
    table = load_split("coconot")
    files = (("eval", "coconot_eval.jsonl"), ("contrast", "coconot_contrast_eval.jsonl"),
             ("pref", "coconot_pref.jsonl"))
    for kind, name in files:
        for r in read_rows(name):
            pid = f"{kind}:{r['id']}"
            if r["category"] == "Requests with safety concerns":
                continue
            if split == "all" or table.get(pid) == split:
                yield CorpusItem(f"coconot_plain/{pid}", "coconot_plain", pid, r["prompt"],
                                 None, _coco_fields("plain", kind, r))


def _coconot_hazards(split: str) -> Iterable[CorpusItem]:
    """CoCoNot's safety concerns that ``coconot`` leaves out, for the hazards bundle."""
    table = load_split("coconot")
    files = (("eval", "coconot_eval.jsonl", "unsafe"), ("pref", "coconot_pref.jsonl", "safe"))
    for kind, name, label in files:
        for r in read_rows(name):
            pid = f"{kind}:{r['id']}"
            if (r["category"] != "Requests with safety concerns"
                    or r["subcategory"] not in COCONOT_HAZARDS
                    or not (split == "all" or table.get(pid) == split)):
                continue
            f = _coco_fields(label, kind, r)
            yield CorpusItem(f"coconot_hazards/{pid}", "coconot_hazards", pid, r["prompt"],
                             None, f)
            if kind == "pref":
                yield CorpusItem(f"coconot_hazards/{pid}/chosen", "coconot_hazards", pid,
                                 r["prompt"], r["chosen"],
                                 {**f, "final_label": "1_full_compliance"})


def _answer_texts(split: str) -> Iterable[CorpusItem]:
    """The helpful answers to safe prompts, read as texts (see the module's docstring)."""
    for src in ("xstest", "coconot", "coconot_hazards"):
        for it in _LOADERS[src](split):
            if (it.response is None or it.fields.get("label") != "safe"
                    or it.fields.get("final_label") != "1_full_compliance"):
                continue
            text = it.response.strip()
            if len(text) > ANSWER_TEXT_CHARS:
                text = text[:ANSWER_TEXT_CHARS].rsplit(" ", 1)[0]
            fields = {k: v for k, v in it.fields.items() if k not in ("final_label", "model")}
            yield CorpusItem(f"answer_texts/{it.uid}", "answer_texts", it.prompt_id, text,
                             None, fields)


def _plguard_s14(split: str) -> Iterable[CorpusItem]:
    table = load_split("plguard_s14")
    for r in read_rows("requests.jsonl", "plguard_s14"):
        if split == "all" or table.get(r["id"]) == split:
            yield CorpusItem(f"plguard_s14/{r['id']}", "plguard_s14", r["id"], r["prompt"],
                             None, {"label": r["label"], "type": f"plguard_s14_{r['label']}",
                                    "harm": frozenset()})


def _plguard_passages(split: str, hosted_too: bool = False) -> Iterable[CorpusItem]:
    """The developers' dev passages (``eval/data/plguard_passages``): dev only, every item.

    Harmful passages alone (the answer *is* the passage: a window of a benign host answer
    would carry the harmful label without its evidence) and benign answers on topics that
    sound dangerous. Their test set is ``tests/data/unseen``, written apart and never
    trained on, so this source has no test split. With ``hosted_too`` (the corpus name
    ``plguard_passages_hosted``, tried on dev and not adopted: docs/quality.md, *240 dev
    passages*) each harmful passage is also hosted between two short runs of a benign
    answer's words (:func:`hosted`), under the same source and prompt, so holding the
    source out holds both out.
    """
    if split == "test":
        return
    root = data_root("plguard_passages")
    benign = yaml.safe_load((root / "benign.yaml").read_text(encoding="utf-8"))
    # The long answers there were when hosting was tried (e41-e120; e121-e240 came later).
    hosts = [e["answer"] for e in benign if 40 < int(e["id"][1:]) <= 120]
    for kind, key, label in (("harmful", "passage", "harmful"), ("benign", "answer", "benign")):
        for e in yaml.safe_load((root / f"{kind}.yaml").read_text(encoding="utf-8")):
            group = e.get("category") or e["topic"].replace(" ", "_").replace("-", "_")
            fields = {"type": f"plguard_passages_{group}/{label}"}
            yield CorpusItem(f"plguard_passages/{e['id']}", "plguard_passages", e["id"],
                             e["request"], e[key].strip(), fields)
            if hosted_too and kind == "harmful":
                yield CorpusItem(f"plguard_passages/{e['id']}@hosted", "plguard_passages",
                                 e["id"], e["request"], hosted(e["passage"], hosts, e["id"]),
                                 fields)


# A hosted passage's benign edges: few enough words that every 64-token window of the
# hosted text keeps about half its tokens in the passage (a window is labelled harmful).
HOST_WORDS = (8, 20)


def hosted(passage: str, hosts: Sequence[str], seed: str) -> str:
    """``passage`` between the end of one benign sentence run and the start of another.

    A harmful passage in a real answer is read in windows that hold some of the benign
    text around it, at offsets nobody chose; fitted on passages alone, a head meets such
    windows only at inference. The host and both edges' lengths are drawn from ``seed``
    (the passage id), so the corpus is the same on every run.
    """
    rng = random.Random(f"hosted/{seed}")
    host = rng.choice(list(hosts))
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", host.strip()) if s]
    cut = rng.randrange(1, len(sentences))
    before = " ".join(sentences[:cut]).split()[-rng.randint(*HOST_WORDS):]
    after = " ".join(sentences[cut:]).split()[:rng.randint(*HOST_WORDS)]
    return f"{' '.join(before)}\n\n{passage.strip()}\n\n{' '.join(after)}"


def hh_split(context: str) -> str:
    """Dev or test for an hh-harmless conversation (by its text; see its SOURCE.md)."""
    return "dev" if int(hashlib.sha256(context.encode()).hexdigest()[:8], 16) % 2 == 0 \
        else "test"


def hh_turns(text: str) -> list[tuple[str, str]]:
    """``(speaker, text)`` turns of an hh-harmless transcript."""
    parts = _TURN.split(text)
    return [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]


def hh_pairs(split: str) -> Iterable[tuple[int, str, str, str]]:
    """``(row, last human turn, chosen reply, rejected reply)`` of one split's conversations.

    Conversations whose transcripts do not end in a human turn and a non-empty reply on
    both sides are skipped.
    """
    path = data_root("hh-harmless") / "harmless-base-test.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            row = json.loads(line)
            turns = {k: hh_turns(row[k]) for k in ("chosen", "rejected")}
            if any(len(t) < 2 or t[-1][0] != "Assistant" or t[-2][0] != "Human"
                   for t in turns.values()):
                continue
            context = row["chosen"][:row["chosen"].rfind("\n\nAssistant: ")]
            if split != "all" and hh_split(context) != split:
                continue
            yield i, turns["chosen"][-2][1], turns["chosen"][-1][1], turns["rejected"][-1][1]


def _hh_harmless(split: str) -> Iterable[CorpusItem]:
    for i, request, chosen, rejected in hh_pairs(split):
        if not (chosen and rejected) or chosen == rejected:
            continue  # an identical pair says nothing
        for role, reply in (("chosen", chosen), ("rejected", rejected)):
            yield CorpusItem(f"hh_harmless/{i}/{role}", "hh_harmless", f"hh/{i}", request,
                             reply, {"pair": f"hh/{i}", "pair_role": role,
                                     "type": "hh_harmless", "harm": frozenset()})


def _vendored(name: str) -> Callable[[str], Iterable[CorpusItem]]:
    """The loader of one of :mod:`~plguard_lab.training.corpus_sets`' sources."""
    def load(split: str) -> Iterable[CorpusItem]:
        table = load_split(name) if split != "all" else {}
        for uid, pid, request, response, fields in corpus_sets.records(name, data_root(name)):
            if split == "all" or table.get(pid) == split:
                yield CorpusItem(f"{name}/{uid}", name, pid, request, response, fields)
    return load


_LOADERS: dict[str, Callable[[str], Iterable[CorpusItem]]] = {
    "xstest": _xstest, "ailuminate": _ailuminate, "coconot": _coconot,
    "coconot_plain": _coconot_plain, "coconot_hazards": _coconot_hazards,
    "plguard_s14": _plguard_s14, "hh_harmless": _hh_harmless,
    "answer_texts": _answer_texts, "plguard_passages": _plguard_passages,
    "plguard_passages_hosted": functools.partial(_plguard_passages, hosted_too=True),
    **{n: _vendored(n) for n in corpus_sets.SETS}}


def check_sources(sources: Sequence[str]) -> None:
    """ConfigError naming every unknown source and the known ones (checked before any work)."""
    unknown = [s for s in sources if s not in _LOADERS]
    if unknown or not sources:
        raise ConfigError(f"unknown training source(s) {', '.join(unknown) or '(none given)'}; "
                          f"known: {', '.join(_LOADERS)}")


def load_corpus(sources: Sequence[str] = SOURCES, split: str = "dev",
                limit_per_source: int | None = None, seed: int = SPLIT_SEED
                ) -> list[CorpusItem]:
    """The items of ``sources`` in ``split``; ``limit_per_source`` keeps a seeded subset.

    A subset keeps each source's requests and pairs in proportion (shuffled by a hash of
    the uid, so a larger limit holds every item of a smaller one). XSTest is never cut:
    its human-labelled answers are the only labels of response predicates (unsafe
    compliances above all) and the scarcest ones.
    """
    check_sources(sources)
    out: list[CorpusItem] = []
    for s in sources:
        items = list(_LOADERS[s](split))
        if limit_per_source is not None and s not in UNLIMITED:
            # A pair's two replies count as one item and stay together.
            keys = sorted({it.fields.get("pair", it.uid) for it in items},
                          key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).digest())
            keep = set(keys[:limit_per_source])
            items = [it for it in items if it.fields.get("pair", it.uid) in keep]
        out.extend(items)
    return out


__all__ = ["LICENCES", "SOURCES", "CorpusItem", "check_sources", "data_root", "hh_pairs",
           "hh_split", "hh_turns", "load_corpus", "load_split", "make_split", "read_rows",
           "split_keys"]

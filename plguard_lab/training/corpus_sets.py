"""Nine more labelled sets for the heads corpus, read as records the corpus wraps.

Sources (vendored under ``eval/data/<name>/``, each with its SOURCE.md and LICENSE; the
label map, per bundle, is docs/label-map.md):

* ``catqa``: CatQA (en, zh, vi; zh and vi translate en row for row), HarmfulQA and
  DangerousQA: harmful requests, CatQA's by harm category and subcategory.
* ``aart``: AART's adversarial harmful requests, by crime or topic.
* ``gptfuzz``: GPTFuzz's 99 harmful questions (request items) and 7,623 labelled answers
  to them under jailbreak templates (pairs: 1 = complied harmfully, 0 = refused or
  nothing harmful).
* ``alpaca``: Stanford Alpaca's benign instructions (CC BY-NC 4.0: non-commercial).
* ``hatecheck``: HateCheck's hateful and non-hateful statements (29 functional tests).
* ``multijail``: MultiJail's unsafe requests in 10 languages, with harm tags.
* ``xsafety``: XSafety's safety-scenario prompts in 10 languages (research use only).
* ``diasafety``: DiaSafety's (context, response) pairs, Safe/Unsafe on the response.
* ``davidson``: Davidson et al.'s tweets: hate speech, offensive, neither.

What gold rules read (``fields``; rules may only read ``label``, ``type``, ``harm`` and
the other fields of :data:`plguard_lab.labels.gold.FIELDS`, so each set's category and a
pair's answer label are spelt into ``type``):

* ``label``: ``unsafe`` (a harmful request: catqa, aart, gptfuzz, multijail), ``plain``
  (alpaca), ``hateful``/``not_hateful`` (hatecheck), ``hate``/``offensive``/``neither``
  (davidson), ``unlabelled`` (xsafety: no harm label; diasafety: the context is not
  labelled). Statements get labels of their own so that no rule written for requests
  ("``unsafe``: seeks harm") reads them by accident.
* ``type``: ``<source>_<category slug>``; catqa ``catqa_<category>/<subcategory>``
  (``catqa_harmfulqa``, ``catqa_dangerousqa``); gptfuzz ``gptfuzz_<kind>`` for a question
  and ``gptfuzz_<kind>/harmful`` or ``/not_harmful`` for an answer; diasafety
  ``diasafety_<category>/safe`` or ``/unsafe``; multijail ``multijail`` (its tags, one
  or more per row, are in ``harm``).
* ``harm``: empty, except multijail's tag slugs (:data:`MULTIJAIL_TAGS`).
* ``lang`` (ISO 639-1) on every item; ``form: statement`` on hatecheck and davidson
  (texts a user might send or a model might write, not requests); the set's own columns
  (``category``, ``crime``, ``response_label`` ...) for the fitter and for reading.

Splits are by item, never by row (``split.json`` beside each set, :func:`split_keys`):
translations share a prompt id, and templated rows share one where their templates do.
This module imports nothing of :mod:`plguard_lab.training.corpus`, which registers these
loaders, so the two stay out of an import circle.
"""

from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import html
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SETS: tuple[str, ...] = ("catqa", "aart", "gptfuzz", "alpaca", "hatecheck", "multijail",
                         "xsafety", "diasafety", "davidson")
LICENCES = {
    "catqa": "Apache-2.0 (declare-lab red-instruct: CatQA, HarmfulQA, DangerousQA)",
    "aart": "CC-BY-4.0 (Google AART v1)",
    "gptfuzz": "MIT (GPTFuzz questions and labelled responses)",
    "alpaca": "CC-BY-NC-4.0 (Stanford Alpaca instructions): NON-COMMERCIAL, research use "
              "only; heads trained on it must not be used commercially",
    "hatecheck": "CC-BY-4.0 (HateCheck test suite)",
    "multijail": "MIT (MultiJail, DAMO-NLP-SG)",
    "xsafety": "Apache-2.0 (XSafety), upstream README: RESEARCH USE ONLY; heads trained on "
               "it are for research use only",
    "diasafety": "Apache-2.0 (DiaSafety, thu-coai)",
    "davidson": "MIT (Davidson et al. 2017, hate speech and offensive language)",
}
# What each split is stratified by (written into split.json).
STRATA = {"catqa": "set/category", "aart": "crime", "gptfuzz": "share of harmful answers",
          "alpaca": "none", "hatecheck": "functionality of the template family's root",
          "multijail": "first tag", "xsafety": "category", "diasafety": "category",
          "davidson": "class"}
# A record: (uid within the source, prompt id, request, response or None, fields).
Record = tuple[str, str, str, str | None, dict[str, Any]]

CATQA_FILES = (("en", "catqa_english.csv"), ("zh", "catqa_chinese.csv"),
               ("vi", "catqa_vietnamese.csv"))
MULTIJAIL_LANGS = ("en", "zh", "it", "vi", "ar", "ko", "th", "bn", "sw", "jv")
MULTIJAIL_TAGS = {
    "Violence & incitement": "violence", "Discrimination & injustice": "discrimination",
    "Hate speech & offensive language": "hate_speech", "Bullying & harassment": "bullying",
    "Non-violent unethical behavior (e.g. lying, cheating, etc.)": "unethical",
    "Conspiracy theories & misinformation": "conspiracy", "Theft": "theft",
    "Adult content": "adult_content", "Weapons": "weapons",
    "Substance abuse & banned substances": "substance_abuse",
    "Terrorism & organized crime": "terrorism", "Fraud & deception": "fraud",
    "Sexual exploitation & human trafficking": "sexual_exploitation",
    "Animal abuse": "animal_abuse", "Property crime & vandalism": "property_crime",
    "Soliciting personally identifiable information": "pii", "Self-harm": "self_harm",
    "Child abuse": "child_abuse"}
XSAFETY_LANG = {"sp": "es"}  # upstream folder names that are not ISO codes
# Upstream quirks: ru's file name drops an "s"; hi's second commonsense file
# (commen_sense.csv) repeats its first one almost character for character, so it is
# skipped rather than counted twice.
XSAFETY_CATEGORY = {"Crimes_And_Illegal_Activitie": "Crimes_And_Illegal_Activities"}
XSAFETY_SKIP = ("commonsense_dup",)
# GPTFuzz questions that are not plain how-to requests (the other 97 are): an insult
# asked for, and a question asked to protect one's own car. Their answers and request
# labels differ (docs/label-map.md).
GPTFUZZ_KIND = {"87": "insult", "47": "protective"}
DAVIDSON_CLASS = {"0": "hate", "1": "offensive", "2": "neither"}
_REGION = re.compile(r"\s+in\s+.*$")


def slug(text: str) -> str:
    """``Hate/Harass/Violence`` -> ``hate_harass_violence``."""
    return re.sub(r"[^a-z0-9]+", "_", text.casefold()).strip("_")


def _csv(root: Path, name: str) -> list[dict[str, str]]:
    path = root / name
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _fields(label: str, type_: str, lang: str, **extra: Any) -> dict[str, Any]:
    harm = extra.pop("harm", frozenset())
    return {"label": label, "type": type_, "harm": harm, "lang": lang, **extra}


# -- readers: one per source ----------------------------------------------------------------

def _catqa(root: Path) -> Iterator[Record]:
    for lang, name in CATQA_FILES:
        for r in _csv(root, name):
            t = f"catqa_{slug(r['category'])}/{slug(r['subcategory'])}"
            yield (f"{lang}/{r['idx']}", f"catqa:{r['idx']}", r["prompt"].strip(), None,
                   _fields("unsafe", t, lang, category=r["category"],
                           subcategory=r["subcategory"]))
    for i, r in enumerate(_csv(root, "harmfulqa.csv")):
        yield (f"harmfulqa/{i}", f"harmfulqa:{i}", r["prompt"].strip(), None,
               _fields("unsafe", "catqa_harmfulqa", "en", topic=r["category"],
                       subtopic=r["subcategory"]))
    for i, r in enumerate(_csv(root, "dangerousqa.csv")):
        yield (f"dangerousqa/{i}", f"dangerousqa:{i}", r["prompt"].strip(), None,
               _fields("unsafe", "catqa_dangerousqa", "en"))


def aart_topic(topic: str) -> str:
    """AART's topic with its region cut off: the template its rows were generated from.

    ``How to steal a car in Oslo`` and ``... in Lima`` are one template (36 regions ask
    "how to steal a car"), so they are one item for the split.
    """
    return _REGION.sub("", " ".join(topic.casefold().split()))


def _aart(root: Path) -> Iterator[Record]:
    for i, r in enumerate(_csv(root, "aart-v1-20231117.filtered.csv.gz")):
        yield (str(i), f"aart:{aart_topic(r['region_specific_topic'])}", r["prompt"].strip(),
               None, _fields("unsafe", f"aart_{slug(r['crime'])}", "en", crime=r["crime"],
                             medium=r["medium_keyword"], region=r["region"]))


def _gptfuzz(root: Path) -> Iterator[Record]:
    for q in _csv(root, "question_list.csv"):
        kind = GPTFUZZ_KIND.get(q["index"], "howto")
        yield (f"q{q['index']}", f"q{q['index']}", q["text"].strip(), None,
               _fields("unsafe", f"gptfuzz_{kind}", "en"))
    for i, r in enumerate(_csv(root, "responses_labeled.csv.gz")):
        kind = GPTFUZZ_KIND.get(r["question_index"], "howto")
        answer = "harmful" if r["label"] == "1" else "not_harmful"
        yield (f"q{r['question_index']}/r{i}", f"q{r['question_index']}", r["question"].strip(),
               r["response"], _fields("unsafe", f"gptfuzz_{kind}/{answer}", "en",
                                      response_label=int(r["label"]),
                                      upstream_split=r["split"]))


def _alpaca(root: Path) -> Iterator[Record]:
    with gzip.open(root / "alpaca_instructions.jsonl.gz", "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            text = json.loads(line)["instruction"].strip()
            yield str(i), str(i), text, None, _fields("plain", "alpaca", "en")


def hatecheck_families(rows: list[dict[str, str]]) -> dict[str, str]:
    """``templ_id`` -> the smallest template id of its family.

    A family is a template and every template derived from it (``ref_templ_id``):
    "I h4te women" (spelling variant), "If you say 'I hate women', you are a bigot"
    (counter-speech) and "I don't hate women" (negation) are rewrites of "I hate women",
    and a split by ``templ_id`` alone would put them on both sides.
    """
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for r in rows:
        a = find(r["templ_id"])
        if r["ref_templ_id"]:
            b = find(r["ref_templ_id"])
            lo, hi = sorted((a, b), key=int)
            parent[hi] = lo
    return {r["templ_id"]: find(r["templ_id"]) for r in rows}


def _hatecheck_rows(root: Path) -> list[dict[str, str]]:
    return _csv(root, "test_suite_cases.filtered.csv.gz")


def _hatecheck(root: Path) -> Iterator[Record]:
    rows = _hatecheck_rows(root)
    family = hatecheck_families(rows)
    for r in rows:
        label = "hateful" if r["label_gold"] == "hateful" else "not_hateful"
        yield (r["case_id"], f"templ:{family[r['templ_id']]}", r["test_case"].strip(), None,
               _fields(label, f"hatecheck_{r['functionality']}", "en", form="statement",
                       target=r["target_ident"]))


def multijail_tags(raw: str) -> frozenset[str]:
    """MultiJail's ``tags`` cell (a Python-style list) as slugs."""
    return frozenset(MULTIJAIL_TAGS[t] for t in ast.literal_eval(raw))


def _multijail(root: Path) -> Iterator[Record]:
    for r in _csv(root, "MultiJail.filtered.csv.gz"):
        tags = multijail_tags(r["tags"])
        for lang in MULTIJAIL_LANGS:
            yield (f"{lang}/{r['id']}", r["id"], r[lang].strip(), None,
                   _fields("unsafe", "multijail", lang, harm=tags, origin=r["source"]))


def _xsafety_rows(root: Path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """``(category, prompt id, row)`` of the rows kept."""
    for r in _csv(root, "xsafety_all_languages.csv.gz"):
        if r["category"] in XSAFETY_SKIP:
            continue
        cat = XSAFETY_CATEGORY.get(r["category"], r["category"])
        yield cat, f"{cat}/{r['row']}", r


def _xsafety(root: Path) -> Iterator[Record]:
    for cat, pid, r in _xsafety_rows(root):
        lang = XSAFETY_LANG.get(r["lang"], r["lang"])
        yield (f"{lang}/{pid}", pid, r["prompt"].strip(), None,
               _fields("unlabelled", f"xsafety_{slug(cat)}", lang, category=cat))


def diasafety_context_id(context: str) -> str:
    """A context's prompt id: 803 contexts recur, with other responses, across splits."""
    return "ctx:" + hashlib.sha256(" ".join(context.split()).encode()).hexdigest()[:16]


def _diasafety(root: Path) -> Iterator[Record]:
    for i, r in enumerate(_csv(root, "diasafety.filtered.csv.gz")):
        if not r["response"].strip():
            continue  # 3 Safe rows answer with nothing: no reply to read
        t = f"diasafety_{slug(r['category'])}/{r['label'].casefold()}"
        yield (str(i), diasafety_context_id(r["context"]), r["context"].strip(),
               r["response"].strip(), _fields("unlabelled", t, "en", category=r["category"],
                                              response_label=r["label"],
                                              upstream_split=r["split"]))


def _davidson(root: Path) -> Iterator[Record]:
    for r in _csv(root, "labeled_data.filtered.csv.gz"):
        cls = DAVIDSON_CLASS[r["class"]]
        # Tweets were scraped with HTML entities (&amp;, &#128514;); a user sends the text.
        yield (r[""], r[""], html.unescape(r["tweet"]).strip(), None,
               _fields(cls, f"davidson_{cls}", "en", form="statement",
                       votes={k: int(r[k]) for k in ("hate_speech", "offensive_language",
                                                     "neither")}))


_READERS = {"catqa": _catqa, "aart": _aart, "gptfuzz": _gptfuzz, "alpaca": _alpaca,
            "hatecheck": _hatecheck, "multijail": _multijail, "xsafety": _xsafety,
            "diasafety": _diasafety, "davidson": _davidson}


def records(name: str, root: Path) -> Iterator[Record]:
    """Every record of source ``name`` from its vendored folder ``root``."""
    return _READERS[name](root)


# -- split keys ------------------------------------------------------------------------------

def _first_stratum(pairs: Iterator[tuple[str, str]]) -> list[tuple[str, str]]:
    """One ``(prompt id, stratum)`` per prompt: its most common stratum (ties: smallest)."""
    seen: dict[str, Counter[str]] = {}
    for pid, stratum in pairs:
        seen.setdefault(pid, Counter())[stratum] += 1
    return [(pid, min(c, key=lambda s: (-c[s], s))) for pid, c in seen.items()]


def split_keys(name: str, root: Path) -> list[tuple[str, str]]:
    """``(prompt id, stratum)`` of every item of source ``name``, the input of its split."""
    if name == "gptfuzz":
        share: dict[str, list[int]] = {}
        for r in _csv(root, "responses_labeled.csv.gz"):
            share.setdefault(f"q{r['question_index']}", []).append(int(r["label"]))
        mean = {pid: sum(v) / len(v) for pid, v in share.items()}
        median = sorted(mean.values())[len(mean) // 2]
        return [(pid, "high" if m >= median else "low") for pid, m in mean.items()]
    if name == "hatecheck":
        rows = _hatecheck_rows(root)
        family = hatecheck_families(rows)
        root_func = {r["templ_id"]: r["functionality"] for r in rows}
        return _first_stratum((f"templ:{family[r['templ_id']]}",
                               root_func[family[r["templ_id"]]]) for r in rows)
    if name == "xsafety":
        return _first_stratum((pid, cat) for cat, pid, _ in _xsafety_rows(root))
    if name == "multijail":
        return [(r["id"], MULTIJAIL_TAGS[ast.literal_eval(r["tags"])[0]])
                for r in _csv(root, "MultiJail.filtered.csv.gz")]

    def stratum(fields: dict[str, Any]) -> str:
        if name == "catqa":
            return str(fields.get("category") or fields["type"])
        return {"aart": str(fields.get("crime")), "alpaca": "all",
                "diasafety": str(fields.get("category")),
                "davidson": str(fields["label"])}[name]

    return _first_stratum((pid, stratum(f)) for _, pid, _, _, f in records(name, root))


__all__ = ["LICENCES", "MULTIJAIL_TAGS", "SETS", "STRATA", "Record", "aart_topic",
           "diasafety_context_id", "hatecheck_families", "multijail_tags", "records", "slug",
           "split_keys"]

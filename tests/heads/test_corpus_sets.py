"""The nine corpus sets of plguard_lab.training.corpus_sets: loading, splits, gold labels.

Fast (no model): the vendored files are read and each bundle's gold.yaml applied to a few
representative items (docs/label-map.md says what each source labels and why).
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cache

import pytest

from plguard_lab.labels.gold import Sample, load_gold
from plguard_lab.training import corpus, corpus_sets
from plguard_lab.training.corpus import CorpusItem

SETS = corpus_sets.SETS
U = "unknown"


@cache
def _load(source: str, split: str) -> tuple[CorpusItem, ...]:
    return tuple(corpus.load_corpus([source], split=split))


@cache
def _gold(bundle: str):  # noqa: ANN202 - a GoldMapping
    return load_gold(bundle)


def gold(bundle: str, it: CorpusItem) -> dict[str, float | str]:
    """Predicate -> 0/1 or "unknown" for one item under a bundle's gold.yaml."""
    v = _gold(bundle).values(Sample(it.uid, it.prompt_id, it.fields, it.request,
                                    it.response or ""))
    return {k: U if math.isnan(x) else int(x) for k, x in v.items()}


def one(source: str, **want: object) -> CorpusItem:
    """The first item of ``source`` whose fields (and ``response is None``) match ``want``."""
    is_pair = want.pop("pair", False)
    for it in _load(source, "all"):
        if (it.response is not None) == is_pair and all(
                it.fields.get(k) == v for k, v in want.items()):
            return it
    raise AssertionError(f"no {source} item with {want}")


# -- loading and splits -----------------------------------------------------------------------

@pytest.mark.parametrize("source", SETS)
def test_every_set_loads_and_splits_by_prompt(source):
    dev, test, every = _load(source, "dev"), _load(source, "test"), _load(source, "all")
    assert dev and test
    assert len(dev) + len(test) == len(every)
    assert len({it.uid for it in every}) == len(every)  # uids are unique
    assert not {it.prompt_id for it in dev} & {it.prompt_id for it in test}
    for it in every:
        assert it.source == source and it.uid.startswith(f"{source}/")
        assert it.request.strip() and (it.response is None or it.response.strip())
        f = it.fields
        assert isinstance(f["label"], str) and f["type"].startswith(source.split("_")[0])
        assert isinstance(f["harm"], frozenset) and len(f["lang"]) == 2
    # About half the prompts on each side (seeded, stratified).
    n_dev = len({it.prompt_id for it in dev})
    n_test = len({it.prompt_id for it in test})
    assert abs(n_dev - n_test) <= 0.02 * (n_dev + n_test) + 2


@pytest.mark.parametrize("source", SETS)
def test_committed_split_equals_make_split(source):
    keys = corpus.split_keys(source)
    assert len({pid for pid, _ in keys}) == len(keys)  # one stratum per prompt
    assert corpus.load_split(source) == corpus.make_split(keys)


def _side_by(source: str, key) -> dict[object, set[str]]:  # noqa: ANN001
    sides: dict[object, set[str]] = {}
    for split in ("dev", "test"):
        for it in _load(source, split):
            sides.setdefault(key(it), set()).add(split)
    return sides


@pytest.mark.parametrize("source, key, langs", [
    # catqa/<lang>/<idx>: zh and vi translate en row for row.
    ("catqa", lambda it: it.uid.split("/")[2] if it.uid.count("/") == 2
     and it.uid.split("/")[1] in ("en", "zh", "vi") else it.uid, {"en", "zh", "vi"}),
    # multijail/<lang>/<id>: one prompt in 10 languages.
    ("multijail", lambda it: it.uid.split("/")[2], set(corpus_sets.MULTIJAIL_LANGS)),
    # xsafety/<lang>/<category>/<row>: one scenario prompt in up to 9 languages.
    ("xsafety", lambda it: tuple(it.uid.split("/")[2:]),
     {"ar", "bn", "de", "en", "es", "fr", "hi", "ja", "ru", "zh"}),
])
def test_no_translation_of_a_test_item_is_in_dev(source, key, langs):
    # Read the item behind each translation from its uid, not from prompt_id: this checks
    # what the split is by, not that prompt_id equals itself.
    sides = _side_by(source, key)
    assert all(len(s) == 1 for s in sides.values())
    assert {it.fields["lang"] for it in _load(source, "all")} == langs
    by_item = Counter(key(it) for it in _load(source, "all"))
    assert max(by_item.values()) == len(langs)  # (xsafety: bn has commonsense only)


def test_templated_rows_share_a_prompt():
    # AART: one template in many regions; HateCheck: a template and its rewrites.
    aart = Counter(it.prompt_id for it in _load("aart", "all"))
    assert aart["aart:how to steal a car"] >= 36
    rows = {it.request: it.prompt_id for it in _load("hatecheck", "all")}
    assert rows["I hate women."] == rows["I h4te women."] == rows[
        "Let me be clear: I don't hate women."]
    # GPTFuzz: a question and its 77 answers; DiaSafety: a context and its replies.
    q = Counter(it.prompt_id for it in _load("gptfuzz", "all"))
    assert set(q.values()) == {78}
    ctx: dict[str, set[str]] = {}
    for it in _load("diasafety", "all"):
        ctx.setdefault(" ".join(it.request.split()), set()).add(it.prompt_id)
    assert all(len(p) == 1 for p in ctx.values())


# -- counts as SOURCE.md gives them ----------------------------------------------------------

def _labels(source: str, field: str = "label", pairs: bool | None = None) -> Counter:
    return Counter(it.fields.get(field) for it in _load(source, "all")
                   if pairs is None or (it.response is not None) == pairs)


def test_counts_per_class_match_the_sources():
    assert _labels("hatecheck") == {"hateful": 2552, "not_hateful": 1165}
    assert _labels("gptfuzz", "response_label", pairs=True) == {0: 5396, 1: 2227}
    assert _labels("gptfuzz", pairs=False) == {"unsafe": 99}
    assert _labels("davidson") == {"hate": 1429, "offensive": 19164, "neither": 4163}
    # 3 Safe rows with an empty response are skipped (SOURCE.md: Safe 6,011).
    assert _labels("diasafety", "response_label") == {"Safe": 6008, "Unsafe": 5176}
    assert _labels("catqa") == {"unsafe": 550 * 3 + 1958 + 193}
    assert _labels("aart") == {"unsafe": 3268}
    assert _labels("alpaca") == {"plain": 31315}
    assert _labels("multijail") == {"unsafe": 311 * 10}
    # 25,581 rows less hi's 200 duplicate commonsense rows.
    assert _labels("xsafety") == {"unlabelled": 25381}
    assert Counter(it.fields["category"] for it in _load("catqa", "all")
                   if it.fields["lang"] == "en" and "category" in it.fields) == {
        c: 50 for c in ("Illegal Activity", "Child Abuse", "Hate/Harass/Violence",
                        "Malware Viruses", "Physical Harm", "Economic Harm", "Fraud/Deception",
                        "Adult Content", "Political Campaigning", "Privacy Violation Activity",
                        "Tailored Financial Advice")}
    tags = Counter(t for it in _load("multijail", "all") if it.fields["lang"] == "en"
                   for t in it.fields["harm"])
    assert tags["violence"] == 85 and tags["child_abuse"] == 6 and len(tags) == 18


def test_restricted_licences_are_spelt_out():
    assert "NON-COMMERCIAL" in corpus.LICENCES["alpaca"]
    assert "RESEARCH USE ONLY" in corpus.LICENCES["xsafety"]
    assert set(SETS) <= set(corpus.LICENCES)


# -- gold labels of representative items ----------------------------------------------------

def test_minimal_gold_labels():
    cases = [
        (one("catqa", lang="zh", category="Malware Viruses"), 1, 0),
        (one("catqa", type="catqa_harmfulqa"), 1, 0),
        (one("aart", crime="murder"), 1, 0),
        (one("aart", crime="landfills"), U, U),  # a mild AART topic
        (one("multijail", lang="sw"), 1, 0),
        (one("gptfuzz", type="gptfuzz_howto"), 1, 0),
        (one("alpaca"), 0, 0),
        (one("hatecheck", type="hatecheck_derog_dehum_h"), U, 0),
        (one("hatecheck", type="hatecheck_counter_quote_nh"), 0, 1),
        (one("hatecheck", type="hatecheck_target_indiv_nh"), U, 0),
        (one("davidson", label="neither"), 0, U),
        (one("davidson", label="offensive"), U, U),
        (one("xsafety", type="xsafety_ethics_and_morality", lang="ja"), 0, U),
        (one("xsafety", type="xsafety_goal_hijacking"), U, U),
    ]
    for it, harmful, benign in cases:
        g = gold("minimal", it)
        assert (g["request_is_harmful"], g["request_is_benign_sensitive_context"]) == (
            harmful, benign), it.uid
    pairs = [
        (one("gptfuzz", pair=True, response_label=1, type="gptfuzz_howto/harmful"), 1),
        (one("gptfuzz", pair=True, response_label=0), 0),
        (one("gptfuzz", pair=True, type="gptfuzz_insult/harmful"), U),
        (one("diasafety", pair=True, response_label="Safe"), 0),
        (one("diasafety", pair=True, response_label="Unsafe"), U),
    ]
    for it, instructions in pairs:
        g = gold("minimal", it)
        assert g["response_provides_harmful_instructions"] == instructions, it.uid
        assert g["response_refuses"] == U, it.uid  # neither set labels refusal


def test_hazards_gold_labels():
    def hz(it: CorpusItem, name: str) -> float | str:
        return gold("hazards", it)[name]

    hateful = one("hatecheck", type="hatecheck_threat_norm_h")
    assert hz(hateful, "request_seeks_hate") == 1
    assert hz(hateful, "request_seeks_violent_crime") == 1
    assert hz(hateful, "request_seeks_nonviolent_crime") == 0
    for t in ("counter_quote_nh", "negate_neg_nh", "target_indiv_nh", "slur_homonym_nh"):
        assert hz(one("hatecheck", type=f"hatecheck_{t}"), "request_seeks_hate") == 0, t
    assert hz(one("davidson", label="hate"), "request_seeks_hate") == 1
    assert hz(one("davidson", label="offensive"), "request_seeks_hate") == U
    assert hz(one("davidson", label="offensive"), "request_seeks_indiscriminate_weapons") == 0
    assert hz(one("davidson", label="neither"), "request_seeks_hate") == 0
    # CatQA and AART categories.
    malware = one("catqa", category="Malware Viruses")
    assert hz(malware, "request_seeks_nonviolent_crime") == 1
    assert hz(malware, "request_seeks_hate") == 0
    assert hz(one("catqa", category="Hate/Harass/Violence",
                  subcategory="Racial or ethnic hate"), "request_seeks_hate") == 1
    assert hz(one("catqa", subcategory="Online predation"), "request_sexualises_minors") == 1
    assert hz(one("catqa", type="catqa_dangerousqa"), "request_seeks_hate") == U
    assert hz(one("aart", crime="bombings"), "request_seeks_indiscriminate_weapons") == 1
    assert hz(one("aart", crime="bombings"), "request_seeks_self_harm") == 0
    assert hz(one("aart", crime="hate crimes"), "request_seeks_hate") == 1
    # MultiJail: the union of its tags.
    mj = next(it for it in _load("multijail", "all")
              if it.fields["harm"] == {"weapons", "violence"})
    assert hz(mj, "request_seeks_violent_crime") == 1
    assert hz(mj, "request_seeks_private_information") == 0
    assert hz(one("multijail", harm=frozenset({"pii"})),
              "request_seeks_private_information") == 1
    # GPTFuzz: no harm type; answers by label.
    assert hz(one("gptfuzz", type="gptfuzz_howto"), "request_seeks_hate") == U
    yes = one("gptfuzz", pair=True, type="gptfuzz_howto/harmful")
    no = one("gptfuzz", pair=True, type="gptfuzz_howto/not_harmful")
    assert hz(yes, "response_gives_actionable_help") == 1
    assert hz(no, "response_gives_actionable_help") == 0
    assert hz(no, "response_contains_hazardous_content") == 0
    assert hz(yes, "response_contains_hazardous_content") == U
    assert hz(yes, "response_refuses") == hz(no, "response_refuses") == U
    # DiaSafety: Safe replies hold nothing hazardous; an Unsafe one is unknown.
    safe = one("diasafety", pair=True, type="diasafety_risk_ignorance/safe")
    risky = one("diasafety", pair=True, type="diasafety_risk_ignorance/unsafe")
    assert hz(safe, "response_encourages_self_harm") == 0
    assert hz(risky, "response_encourages_self_harm") == U
    assert hz(risky, "response_gives_actionable_help") == U
    # XSafety: quizzes are protective questions; attack wrappers are unlabelled.
    quiz = one("xsafety", type="xsafety_commonsense", lang="de")
    assert hz(quiz, "request_is_educational_or_protective") == 1
    assert hz(quiz, "request_seeks_violent_crime") == 0
    assert hz(one("xsafety", type="xsafety_role_play_instruction"),
              "request_seeks_violent_crime") == U


def test_new_rules_leave_xstest_items_alone():
    # Every new rule names its sources' types (or multijail; plguard_passages' too): XSTest's
    # samples match none, so docs/gold.md's counts are unchanged (tests/evals/test_gold.py
    # checks the file).
    for bundle in ("one_question", "minimal", "moderate", "detailed", "hazards",
                   "very_detailed"):
        for r in _gold(bundle).rules:
            keys = [k for k, _ in r.mapping]
            new = [k for k in keys if k.split("_")[0].rstrip("*") in
                   (*SETS, "multijail") or k.startswith("plguard_passages_")]
            assert not new or len(new) == len(keys) or r.source == "harm", (bundle, keys)
            if r.source == "harm" and dict(r.when).get("type") == ("multijail",):
                assert set(keys) <= set(corpus_sets.MULTIJAIL_TAGS.values())

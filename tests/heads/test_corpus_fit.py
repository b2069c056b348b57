"""The heads corpus and its splits, `plguard heads fit` end to end, the shipped heads."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from plguard_lab.training import corpus
from tests.heads.fakes import FakeExtractor as _Extractor


@pytest.mark.parametrize("name", ["ailuminate", "coconot", "plguard_s14"])
def test_committed_split_equals_make_split(name):
    assert corpus.load_split(name) == corpus.make_split(corpus.split_keys(name))


def test_corpus_dev_and_test_are_disjoint_by_prompt_and_labelled():
    dev = corpus.load_corpus(split="dev")
    test = corpus.load_corpus(split="test")
    assert not {it.prompt_id for it in dev} & {it.prompt_id for it in test}
    kinds = Counter((it.source, it.response is None, it.fields["label"]) for it in dev)
    assert kinds[("ailuminate", True, "unsafe")] == 600  # every AILuminate prompt is hazardous
    assert kinds[("coconot", True, "safe")] > 0 and kinds[("coconot", True, "unsafe")] > 0
    # CoCoNot's helpful answers are full compliance with a benign request; no rejected answer.
    pairs = [it for it in dev if it.source == "coconot" and it.response is not None]
    assert pairs and all(it.fields["final_label"] == "1_full_compliance" for it in pairs)
    assert all(it.uid.endswith("/chosen") for it in pairs)
    sub = corpus.load_corpus(limit_per_source=20)
    bigger = corpus.load_corpus(limit_per_source=40)
    assert {it.uid for it in sub} <= {it.uid for it in bigger}  # a subset nests in a larger one
    n = Counter(it.source for it in sub)
    assert n["ailuminate"] == n["coconot"] == 20 and n["xstest"] == 135 + 675  # never cut


def test_gold_labels_of_corpus_items():
    from plguard.policy import load_policy
    from plguard_lab.training.fit import labels_for

    items = corpus.load_corpus(limit_per_source=60)
    y = labels_for(load_policy("minimal"), items)
    for it, harmful in zip(items, y["request_is_harmful"], strict=True):
        assert harmful == (1.0 if it.fields["label"] == "unsafe" else 0.0)
    refuses = [v for it, v in zip(items, y["response_refuses"], strict=True)
               if it.source == "coconot" and it.response is not None]
    assert refuses and all(v == 0.0 for v in refuses)


def test_layers_setting_names_numbers_ranges_or_all():
    from plguard.errors import ConfigError
    from plguard_lab.training.features import default_layers, parse_layers

    assert parse_layers(None, 28) == default_layers(28) == (9, 14, 19, 23, 28)
    assert parse_layers("all", 4) == (1, 2, 3, 4)
    assert parse_layers("9, 4-6,5", 28) == (4, 5, 6, 9)
    with pytest.raises(ConfigError, match="'29' is outside this model's layers 1-28"):
        parse_layers("4,29", 28)
    with pytest.raises(ConfigError, match="'x' is not a layer number"):
        parse_layers("x", 28)


def test_heads_fit_names_an_unknown_source_before_it_loads_a_model(tmp_path, monkeypatch,
                                                                   capsys):
    import plguard.backends
    from plguard.cli import main

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the sources were checked")

    monkeypatch.setattr(plguard.backends, "load_backend", no_model)
    assert main(["heads", "fit", "--policy", "minimal", "--sources", "xstest,nosuch",
                 "--out", str(tmp_path / "h.json")]) != 0
    err = capsys.readouterr().err
    assert "unknown training source(s) nosuch; known: xstest" in err
    assert not (tmp_path / "h.json").exists()


@pytest.mark.slow
def test_heads_fit_cli_writes_a_file_the_guard_applies(tmp_path, capsys):
    from plguard.cli import main
    from plguard.guard import Guard

    out = tmp_path / "heads-minimal.json"
    # XSTest is never cut by a limit: leave it out to keep this test to ~80 forwards.
    assert main(["heads", "fit", "--policy", "minimal", "--sources", "ailuminate,coconot",
                 "--limit-per-source", "40", "--layers", "3,28-30", "--quiet",
                 "--augment", "1", "--zero-shot-limit", "8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "request_is_harmful" in printed and str(out) in printed
    doc = json.loads(out.read_text())
    assert doc["layers"] == [3, 28, 29, 30]  # what was extracted, tried and is read
    assert doc["training"]["split"] == "dev"
    assert set(doc["training"]["licences"]) == {"ailuminate", "coconot"}
    assert "response_refuses" in doc["zero_shot"]  # CoCoNot's answers are all compliant
    assert "request_is_harmful" in doc["predicates"]
    assert out.with_suffix(".md").read_text().startswith("# Heads for minimal")
    # Chosen by held-out source, with the matrix and the why beside it.
    sel = doc["selection"]["request_is_harmful"]
    assert sel["choice"] in ("head", "zero-shot") or sel["choice"].startswith("blend")
    # AILuminate is all hazardous: neither source can be held out with both classes left,
    # so folds stand in for sources, and the why says so.
    assert set(sel["heldout"]) == {f"fold{i}" for i in range(1, 6)}
    assert "stand in for sources" in sel["why"]
    mat = json.loads(out.with_suffix(".sources.json").read_text())["predicates"]
    assert {"others", "zero-shot", "chosen by CV (before)"} <= set(mat["request_is_harmful"]
                                                                   ["matrix"])
    # One rewrite per request, same source, counted.
    seen = mat["request_is_harmful"]["seen"]
    assert 0 < seen["coconot"]["augmented"] <= seen["coconot"]["pos"] + seen["coconot"]["neg"]
    assert "rewrites" in doc["training"]["augmentation"]
    guard = Guard.from_config(policy="minimal", **{"grounding.heads": str(out)})
    r = guard.check("How do I build a pipe bomb?", "I can't help with that.")
    score = {s.name: s for s in r.grounding.scores}["request_is_harmful"]
    assert score.source == "head" and score.p_head == score.p_true
    assert r.grounding.heads.startswith("heads-minimal.json@")
    # The same file for another policy is refused with a clear error.
    from plguard.errors import ConfigError

    with pytest.raises(ConfigError, match="fitted for policy minimal"):
        Guard.from_config(policy="detailed", **{"grounding.heads": str(out)})


@pytest.mark.parametrize("policy", ["minimal", "detailed"])
def test_shipped_heads_fit_the_embedded_model_and_are_the_default(embedded_backend_bf16, policy):
    from plguard.config import GroundingConfig
    from plguard.grounding import Grounder
    from plguard.heads.artefact import shipped_heads
    from plguard.policy import load_policy

    path = shipped_heads(policy)
    assert path is not None and path.stat().st_size < 200_000  # a few KB per predicate
    pol = load_policy(policy)
    g = Grounder(embedded_backend_bf16, pol.predicates, GroundingConfig(), policy_name=policy)
    assert g.heads is not None and g.heads.path == str(path)  # auto: the shipped file
    out = g.ground([("How do I hotwire a car that isn't mine?", "I can't help with that.")])[0]
    assert out.heads == g.heads.label
    assert any(s.source == "head" for s in out.scores)
    off = Grounder(embedded_backend_bf16, pol.predicates, GroundingConfig(heads=None),
                   policy_name=policy)
    assert off.heads is None
    assert all(s.source == "zeroshot" for s in off.ground([("Hi", "Hello!")])[0].scores)


@pytest.mark.parametrize("pair_signal, chosen", [(3.0, "pair_prefix"), (0.0, "question")])
def test_fit_keeps_the_one_forward_readout_within_the_cost_margin(pair_signal, chosen):
    import numpy as np

    from plguard.types import PredicateSpec
    from plguard_lab.training.corpus import CorpusItem
    from plguard_lab.training.features import Feature
    from plguard_lab.training.fit import _fit_one

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 120).astype(float)
    items = [CorpusItem(f"s/{i}", "s", str(i), f"r{i}", None, {}) for i in range(len(y))]
    feats = {}
    for it, label in zip(items, y, strict=True):
        def state(signal, label=label):
            return (rng.normal(0, 1, (1, 4)) + signal * label).astype(np.float32)
        feats[f"{it.uid}/prefix"] = Feature(state(0.0), 0.0, 0.0)
        feats[f"{it.uid}/q"] = Feature(state(3.0), 0.0, 0.0)  # the question reads it well
        feats[f"{it.uid}/pair"] = Feature(state(pair_signal), 0.0, 0.0)
    spec = PredicateSpec("p", "request", "Is it?")
    fit = _fit_one(spec, _Extractor(feats), items, y, ("question", "prefix", "pair_prefix"),
                   False, 0.01)
    # Both near-perfect: the readout with no question wins; a useless one never does.
    assert fit.readout == chosen and fit.mode == "head"
    assert fit.candidates["question@1"] >= fit.candidates["pair_prefix@1"] - 0.01


def test_a_scope_whose_questions_were_not_forwarded_never_chooses_the_question():
    from plguard.types import PredicateSpec
    from plguard_lab.training.corpus import CorpusItem
    from plguard_lab.training.features import Feature
    from plguard_lab.training.fit import _fit_one

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 120).astype(float)
    items = [CorpusItem(f"s/{i}", "s", str(i), f"r{i}", None, {}) for i in range(len(y))]
    feats = {}
    for it, label in zip(items, y, strict=True):
        feats[f"{it.uid}/prefix"] = Feature(rng.normal(0, 1, (1, 4)).astype(np.float32), 0, 0)
        feats[f"{it.uid}/q"] = Feature((rng.normal(0, 1, (1, 4)) + 3 * label)
                                       .astype(np.float32), 0.0, 0.0)
    spec = PredicateSpec("p", "request", "Is it?")
    ex = _Extractor(feats)
    ex.asks = lambda scope: scope == "response"  # --question-scope response
    fit = _fit_one(spec, ex, items, y, ("question", "prefix"), False, 0.01)
    assert fit.readout == "prefix" and not any(c.startswith("question")
                                               for c in fit.candidates)
    ex.asks = lambda scope: True  # the same states, the question asked: it wins
    assert _fit_one(spec, ex, items, y, ("question", "prefix"), False, 0.01).readout \
        == "question"


def test_a_predicate_read_by_a_content_rule_asks_its_question():
    """minimal's unsafe_content_actionable_harm reads response_provides_harmful_instructions
    on an answer alone (a stream window of a long answer): the fit never gives it a summary
    state, however well that state separates the corpus; response_refuses, read by no
    content rule, takes the one-forward pool state that separates better."""
    from plguard.policy import load_policy
    from plguard_lab.training.corpus import CorpusItem
    from plguard_lab.training.features import Feature
    from plguard_lab.training.fit import content_predicates, fit_policy_heads

    policy = load_policy("minimal")
    assert content_predicates(policy) == {
        "response_provides_harmful_instructions": ["unsafe_content_actionable_harm"]}
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 160).astype(float)
    items = [CorpusItem(f"s{i % 2}/{i}", f"s{i % 2}", str(i), f"r{i}", f"a{i}", {})
             for i in range(len(y))]
    feats = {}
    for it, label in zip(items, y, strict=True):
        for key, signal in (("prefix", 0.0), ("q", 1.0), ("pool", 3.0)):
            feats[f"{it.uid}/{key}"] = Feature(
                (rng.normal(0, 1, (1, 4)) + signal * label).astype(np.float32), 0.0, 0.0)
    ex = _Extractor(feats)
    ex.with_pool = True
    labels = {s.name: y for s in policy.predicates}
    fits = {f.name: f for f in fit_policy_heads(
        policy, ex, items, readouts=("prefix", "pool", "question"), lodo=False,
        scopes=("response",), labels=labels, pairwise={"none"})}
    harm, refuses = fits["response_provides_harmful_instructions"], fits["response_refuses"]
    assert refuses.readout == "pool" and refuses.head is not None
    assert harm.readout == "question" and set(harm.candidates) == {"question@1"}
    assert "unsafe_content_actionable_harm" in harm.why and "question readout only" in harm.why
    assert harm.head is not None and harm.head["info"]["why"] == harm.why
    ex.with_questions = False  # no question states: every readout stays, the trace says why
    fits = {f.name: f for f in fit_policy_heads(
        policy, ex, items, readouts=("prefix", "pool"), lodo=False,
        scopes=("response",), labels=labels, pairwise={"none"})}
    harm = fits["response_provides_harmful_instructions"]
    assert harm.readout == "pool" and "no question readout is extracted" in harm.why


def test_plguard_s14_labels_code_interpreter_abuse_only():
    from plguard.policy import load_policy
    from plguard_lab.training.fit import labels_for

    items = corpus.load_corpus(["plguard_s14"], "all")
    assert Counter(it.fields["label"] for it in items) == {"unsafe": 50, "safe": 50}
    y = labels_for(load_policy("hazards"), items)
    s14 = y["request_seeks_code_interpreter_abuse"]
    assert [v for v in s14] == [1.0 if it.fields["label"] == "unsafe" else 0.0 for it in items]
    # An unsafe one may be a cyber crime too (unknown), and seeks no other hazard.
    crime = y["request_seeks_nonviolent_crime"]
    assert all(np.isnan(c) == (it.fields["label"] == "unsafe")
               for it, c in zip(items, crime, strict=True))
    assert all(v == 0.0 for it, v in zip(items, y["request_seeks_hate"], strict=True))
    assert corpus.LICENCES["plguard_s14"].startswith("CC0")


CONTENT = {"minimal": "response_provides_harmful_instructions",
           "moderate": "response_provides_harmful_content",
           "one_question": "response_contains_harmful_content",
           "detailed": "response_gives_steps_or_tactics",
           "very_detailed": "response_gives_step_by_step",
           "hazards": "response_gives_actionable_help"}


@pytest.mark.parametrize("bundle", sorted(CONTENT))
def test_plguard_passages_label_each_bundles_content_predicate_and_no_other_response_one(bundle):
    from plguard.policy import load_policy
    from plguard_lab.training.fit import labels_for

    items = corpus.load_corpus(["plguard_passages"], "dev")
    assert corpus.load_corpus(["plguard_passages"], "test") == []  # tests/data/unseen is its test
    harmful = [it.fields["type"].endswith("/harmful") for it in items]
    assert sum(harmful) == 120 and len(items) == 360
    policy = load_policy(bundle)
    y = labels_for(policy, items)
    assert y[CONTENT[bundle]].tolist() == [1.0 if h else 0.0 for h in harmful]
    for spec in policy.predicates:  # refusal and the rest: unknown, no head learns them here
        if spec.scope != "request" and spec.name != CONTENT[bundle]:
            assert np.isnan(y[spec.name]).all(), spec.name
    assert corpus.LICENCES["plguard_passages"].startswith("CC0")


def test_plguard_passages_copy_nothing_from_the_unseen_test_set():
    from tests.unseen import load_unseen

    harmful, benign = load_unseen()
    theirs = " ".join(e[k] for e in [*harmful, *benign] for k in e if isinstance(e[k], str))
    theirs_words = theirs.split()
    n = 8  # the same writers share stock phrases of up to 7 words (SOURCE.md), no sentence
    grams = {" ".join(theirs_words[i:i + n]) for i in range(len(theirs_words) - n + 1)}
    for it in corpus.load_corpus(["plguard_passages"], "dev"):
        w = (it.response or "").split()
        shared = [" ".join(w[i:i + n]) for i in range(len(w) - n + 1)
                  if " ".join(w[i:i + n]) in grams]
        assert not shared, (it.uid, shared[:2])
        assert it.request not in theirs


def test_hh_harmless_pairs_stay_together_and_label_only_their_pairwise_predicates():
    import math

    from plguard.policy import load_policy
    from plguard_lab.labels.gold import load_gold
    from plguard_lab.training.corpus import load_corpus
    from plguard_lab.training.fit import labels_for, pairs_of

    small = load_corpus(("hh_harmless",), "dev", limit_per_source=20)
    big = load_corpus(("hh_harmless",), "dev", limit_per_source=40)
    assert len(small) == 40 and {it.uid for it in small} <= {it.uid for it in big}
    pairs = pairs_of(small)
    assert len(pairs) == 20
    for a, b in pairs:  # (more harmful, less harmful) of one conversation
        assert small[a].fields["pair_role"] == "rejected"
        assert small[b].fields["pair_role"] == "chosen"
        assert small[a].request == small[b].request and small[a].response != small[b].response
    test = {it.prompt_id for it in load_corpus(("hh_harmless",), "test")}
    assert not test & {it.prompt_id for it in big}
    policy = load_policy("minimal")
    # No pointwise label: the pairs are used only by the bundle's pairwise: predicates.
    assert all(math.isnan(v) for col in labels_for(policy, small).values() for v in col)
    assert set(load_gold(policy).pairwise) == {"response_provides_harmful_instructions"}


def test_answer_texts_are_safe_prompts_helpful_answers_read_as_texts():
    from plguard.policy import load_policy
    from plguard_lab.training.fit import labels_for

    texts = corpus.load_corpus(("answer_texts",), "dev")
    answers = {it.uid: it for it in corpus.load_corpus(
        ("xstest", "coconot", "coconot_hazards"), "dev") if it.response is not None}
    assert len(texts) > 300
    for it in texts:
        of = answers[it.uid.removeprefix("answer_texts/")]  # the answer it was read from
        assert it.response is None and it.prompt_id == of.prompt_id
        assert of.fields["label"] == "safe" and of.fields["final_label"] == "1_full_compliance"
        assert of.response is not None and of.response.strip().startswith(it.request)
        assert 0 < len(it.request) <= corpus.ANSWER_TEXT_CHARS
    assert {it.uid.split("/")[1] for it in texts} == {"xstest", "coconot", "coconot_hazards"}
    test = corpus.load_corpus(("answer_texts",), "test")
    assert not {it.prompt_id for it in test} & {it.prompt_id for it in texts}  # split by prompt
    y = labels_for(load_policy("hazards"), texts)
    for name in ("request_seeks_violent_crime", "request_seeks_hate",
                 "request_seeks_indiscriminate_weapons"):
        assert all(v == 0.0 for v in y[name]), name  # a benign text seeks no hazard
    assert all(v == 0.0 for v in labels_for(load_policy("minimal"), texts)["request_is_harmful"])


def test_plguard_passages_hosted_adds_each_harmful_passage_inside_benign_words_same_group():
    alone = corpus.load_corpus(["plguard_passages"], "dev")
    both = corpus.load_corpus(["plguard_passages_hosted"], "dev")
    extra = [it for it in both if it.uid.endswith("@hosted")]
    assert [it for it in both if not it.uid.endswith("@hosted")] == alone
    harmful = {it.prompt_id: it for it in alone if it.fields["type"].endswith("/harmful")}
    assert len(extra) == len(harmful) == 120
    hi = corpus.HOST_WORDS[1]  # fewer where the host's first or last sentences are short
    for it in extra:  # held out and folded with its passage: same source, prompt, label
        own = harmful[it.prompt_id]
        assert (it.source, it.fields) == (own.source, own.fields)
        before, passage, after = it.response.split("\n\n", 1)[0], own.response, \
            it.response.rsplit("\n\n", 1)[1]
        assert passage in it.response
        assert 1 <= len(before.split()) <= hi and 1 <= len(after.split()) <= hi
    assert [it.response for it in extra] == [
        it.response for it in corpus.load_corpus(["plguard_passages_hosted"], "dev")
        if it.uid.endswith("@hosted")]  # drawn from the passage id: the same every run

"""Thresholds for a heads file: cross-fitted dev scores, and the calibration's heads check."""

from __future__ import annotations

import json

import numpy as np
import pytest

from plguard.heads.artefact import Head, HeadsFile
from plguard_lab.training.corpus import load_corpus
from plguard_lab.training.features import Feature
from tests.heads.fakes import FakeExtractor


class _Extractor(FakeExtractor):
    """A fake extractor over random states for every item's keys."""

    def __init__(self, items, d=1024, seed=0):
        rng = np.random.default_rng(seed)
        super().__init__({k: Feature(rng.normal(size=(1, d)).astype(np.float32), -0.5, -1.0)
                          for it in items for k in (*self.keys(it), self.pair_key(it))})


def _heads(names, C):
    heads = {n: Head("prefix", 1, "head", np.zeros(64), 0.0, (1.0, 0.0), info={"C": C})
             for n in names}
    return HeadsFile("h.json", "0" * 12, heads, (1,), None, None, "g1", "minimal@x")


def test_prompt_folds_keep_a_prompts_answers_together():
    from plguard_lab.studies.heads.thresholds import prompt_folds, prompt_group

    pairs = [it for it in load_corpus(["xstest"]) if it.response is not None]
    fold = prompt_folds(pairs)
    assert set(fold) == {f"xstest/{p.prompt_id}" for p in pairs} \
        == {prompt_group(p) for p in pairs}
    sizes = np.bincount(list(fold.values()))
    assert len(sizes) == 5 and sizes.max() - sizes.min() <= 1
    assert prompt_folds(pairs) == fold  # seeded


def test_crossfit_scores_are_not_in_sample():
    """Random states carry no signal: a head scoring its own training pairs memorises
    them, a cross-fitted one must not (this fails if a fold's pairs leak into its head)."""
    from sklearn.metrics import roc_auc_score

    from plguard.policy import load_policy
    from plguard_lab.studies.heads.thresholds import _design, _rows, crossfit_matrix
    from plguard_lab.training.fit import fixed_model, labels_for

    policy = load_policy("minimal")
    items = load_corpus(["xstest"])
    ex = _Extractor(items)
    hf = _heads(["request_is_harmful", "response_refuses"], C=100.0)
    pairs, m = crossfit_matrix(policy, ex, items, hf)
    assert m.shape == (len(pairs), len(policy.predicates)) and len(pairs) == 675
    j = policy.predicate_names.index("response_refuses")
    y = labels_for(policy, items)["response_refuses"]
    at = [i for i, it in enumerate(items) if it.response is not None]
    known = ~np.isnan(y[at])
    spec = policy.predicate("response_refuses")
    X, _ = _design(hf.heads["response_refuses"], hf, ex, _rows(spec, ex, pairs))
    insample = fixed_model(100.0).fit(X[known], y[at][known].astype(int)).decision_function(X)
    assert roc_auc_score(y[at][known], insample[known]) > 0.95  # memorised
    assert roc_auc_score(y[at][known], m[known, j]) < 0.7  # cross-fitted: no signal
    # Predicates without a head keep the raw zero-shot P (here sigmoid(-0.5 + 1.0)).
    k = policy.predicate_names.index("response_provides_harmful_instructions")
    assert np.allclose(m[:, k], 1 / (1 + np.exp(-0.5)))


def test_a_prompt_sample_scores_only_its_pairs():
    """--pairs-limit: a seeded sample of prompts; only their pairs are scored, each once."""
    from plguard.policy import load_policy
    from plguard_lab.studies.heads.thresholds import crossfit_matrix, sample_prompts

    policy = load_policy("minimal")
    items = load_corpus(["xstest"])
    keep = sample_prompts(items, 20)
    assert keep is not None and len(keep) == 20 and sample_prompts(items, 20) == keep
    assert sample_prompts(items, 10_000) is None and sample_prompts(items, None) is None
    ex = _Extractor(items)
    hf = _heads(["request_is_harmful", "response_refuses"], C=1.0)
    pairs, m = crossfit_matrix(policy, ex, items, hf, prompt_ids=keep)
    assert {p.prompt_id for p in pairs} == keep and len(pairs) == 100
    assert not np.isnan(m).any()  # every sampled pair has a fold and a score


def test_thresholds_pool_every_source_with_outcome_labels():
    """CoCoNot's helpful answers and the model's own drafts join XSTest's pairs; a draft
    shares its fold with the XSTest prompt it answers, and hh's unlabelled pairs stay out."""
    from plguard.policy import load_policy
    from plguard_lab.studies.heads.thresholds import (
        crossfit_matrix,
        outcome_pairs,
        pair_requests,
        prompt_folds,
    )
    from plguard_lab.training.drafts import draft_item

    policy = load_policy("minimal")
    items = load_corpus(["xstest", "coconot", "hh_harmless"], limit_per_source=30)
    xs = next(it for it in items if it.source == "xstest" and it.response is None
              and it.fields["label"] == "unsafe")
    draft = draft_item(xs, "Sure, here is how.", "1_full_compliance")
    items.append(draft)
    pairs = outcome_pairs(items)
    assert {p.source for p in pairs} == {"xstest", "coconot", "drafts"}
    fold = prompt_folds(pairs)
    assert fold[draft.prompt_id] == fold[f"xstest/{xs.prompt_id}"]
    # A pair whose request the corpus limit left out is read from its own request text
    # (the fake keys states by uid, the real store by text).
    reqs = pair_requests(items, pairs)
    assert any(r.uid.endswith("/request") for r in reqs.values())
    ex = _Extractor([*items, *reqs.values()])
    hf = _heads(["request_is_harmful", "response_refuses"], C=1.0)
    scored, m = crossfit_matrix(policy, ex, items, hf)
    assert scored == pairs and not np.isnan(m).any()


@pytest.mark.slow
def test_calibration_for_heads_is_refused_without_them(embedded_backend_bf16, tmp_path):
    import hashlib

    from plguard.calibration import FORMAT
    from plguard.config import GroundingConfig
    from plguard.errors import ConfigError
    from plguard.grounding import Grounder, backend_identity
    from plguard.guard import Guard
    from plguard.heads.artefact import shipped_heads
    from plguard.policy import load_policy

    pol = load_policy("minimal")
    g = Grounder(embedded_backend_bf16, pol.predicates, GroundingConfig(), policy_name="minimal")
    shipped = shipped_heads("minimal")
    assert g.heads is not None and shipped is not None
    ident = backend_identity(embedded_backend_bf16)
    doc = {"format": FORMAT, "policy": pol.id, "template_version": g.template_version,
           "model": {"model_id": ident["model_id"], "sha256": ident["model_sha256"]},
           "heads": {"file": shipped.name,
                     "sha256": hashlib.sha256(shipped.read_bytes()).hexdigest()},
           "predicates": {}, "thresholds": {"unsafe": 0.123, "over_refusal": None}}
    cal = tmp_path / "calibration-minimal.json"
    cal.write_text(json.dumps(doc))
    # Beside its heads (the embedded model's default): its thresholds decide.
    guard = Guard.from_config(policy="minimal", **{"grounding.calibration": str(cal)})
    assert guard.thresholds.unsafe == pytest.approx(0.123)
    assert guard.thresholds.over_refusal is None
    with pytest.raises(ConfigError, match="fitted for the heads file"):
        Grounder(embedded_backend_bf16, pol.predicates,
                 GroundingConfig(heads=None, calibration=str(cal)), policy_name="minimal")


@pytest.mark.slow
def test_auto_heads_fall_back_to_zero_shot_where_settings_differ(embedded_backend_bf16,
                                                                 tmp_path):
    from plguard.config import GroundingConfig
    from plguard.errors import ConfigError
    from plguard.grounding import Grounder
    from plguard.heads.artefact import shipped_heads
    from plguard.policy import load_policy

    pol = load_policy("minimal")
    # The shipped heads were fitted with the worked examples: without them, 'auto' reads
    # zero-shot (with a warning) instead of failing ...
    with pytest.warns(UserWarning, match="shipped heads do not apply"):
        g = Grounder(embedded_backend_bf16, pol.predicates, GroundingConfig(examples=False),
                     policy_name="minimal")
    assert g.heads is None
    # ... while the same file named explicitly is refused.
    with pytest.raises(ConfigError, match="question"):
        Grounder(embedded_backend_bf16, pol.predicates,
                 GroundingConfig(examples=False, heads=str(shipped_heads("minimal"))),
                 policy_name="minimal")


def test_crossfit_pairs_refit_joint_heads_out_of_fold():
    """The guard's thresholds for joint category heads: each XSTest dev pair takes its
    prompt's P from the joint recipe refitted without that prompt (random states: a fold
    that saw the prompt memorises it, this must not)."""
    from plguard.policy import load_policy
    from plguard_lab.studies.heads.thresholds import crossfit_matrix, outcome_pairs, pair_requests
    from plguard_lab.studies.quality.report import fast_auroc
    from plguard_lab.training.fit import labels_for
    from plguard_lab.training.joint import JointModel, category_predicates

    policy = load_policy("hazards")
    items = load_corpus(["xstest", "ailuminate", "coconot"], "dev", 120)
    ex = _Extractor([*items, *pair_requests(items, outcome_pairs(items)).values()], d=256)
    reqs = [it for it in items if it.response is None]
    labels = labels_for(policy, reqs)
    joint = [n for n in category_predicates(policy) if np.nansum(labels[n] == 1) >= 8]
    assert "request_seeks_violent_crime" in joint
    heads = {n: Head("prefix", 1, "head", np.zeros(256), 0.0, (1.0, 0.0),
                     info={"C": 100.0, "joint": joint}) for n in joint}
    heads["response_refuses"] = Head("prefix", 1, "head", np.zeros(256), 0.0, (1.0, 0.0),
                                     info={"C": 1.0})
    hf = HeadsFile("h.json", "0" * 12, heads, (1,), None, None, "g1", policy.id)
    pairs, m = crossfit_matrix(policy, ex, items, hf)
    assert m.shape == (len(pairs), len(policy.predicates)) and not np.isnan(m).any()
    xs = [i for i, p in enumerate(pairs) if p.source == "xstest"]  # CoCoNot's pool in too
    pairs, m = [pairs[i] for i in xs], m[xs]
    prompt = {it.prompt_id: it for it in reqs if it.source == "xstest"}
    X = np.concatenate([ex.store.feats[ex.keys(it)[0]].states for it in reqs])
    Y = np.column_stack([labels[n] for n in joint])
    insample = JointModel(X, Y, 100.0).proba(X)
    row = {it.uid: i for i, it in enumerate(reqs)}
    at = [row[prompt[p.prompt_id].uid] for p in pairs]
    n = "request_seeks_violent_crime"
    y = labels[n][at]
    known = ~np.isnan(y)
    assert 0 < y[known].sum() < known.sum()
    assert fast_auroc(y[known], insample[at, joint.index(n)][known]) > 0.95  # memorised
    got = m[:, policy.predicate_names.index(n)]
    assert fast_auroc(y[known], got[known]) < 0.75  # out of fold: no signal
    # A pair's request columns are its prompt's: equal across the prompt's answers.
    by_prompt: dict[str, set[float]] = {}
    for p, v in zip(pairs, got, strict=True):
        by_prompt.setdefault(p.prompt_id, set()).add(round(float(v), 12))
    assert all(len(v) == 1 for v in by_prompt.values())


def test_crossfit_pairs_ask_zero_shot_categories_of_the_pairs_requests_only():
    """A category the heads file leaves zero-shot is read from its question, which
    fit-heads asks of the scored pairs' requests only; the other dev requests train the
    joint heads from their states and were never asked (this raised 'items lack stored
    features' when every dev request was scored)."""
    from plguard.policy import load_policy
    from plguard.types import renormalise
    from plguard_lab.studies.heads.thresholds import (
        crossfit_matrix,
        outcome_pairs,
        pair_requests,
        prompt_group,
    )
    from plguard_lab.training.fit import labels_for
    from plguard_lab.training.joint import category_predicates

    policy = load_policy("hazards")
    items = load_corpus(["xstest", "ailuminate", "coconot"], "dev", 120)
    pairs = outcome_pairs(items)
    prompts = pair_requests(items, pairs)
    ex = _Extractor([*items, *prompts.values()], d=64)
    asked = {prompts[prompt_group(p)].uid for p in pairs}
    unasked = [it for it in items if it.response is None and it.uid not in asked]
    assert unasked
    for it in unasked:
        del ex.store.feats[ex.keys(it)[1]]
    reqs = [it for it in items if it.response is None]
    labels = labels_for(policy, reqs)
    joint = [n for n in category_predicates(policy) if np.nansum(labels[n] == 1) >= 8]
    zero_shot = joint.pop()  # left to its question, as heads fit does below the floor
    heads = {n: Head("prefix", 1, "head", np.zeros(64), 0.0, (1.0, 0.0),
                     info={"C": 1.0, "joint": joint}) for n in joint}
    hf = HeadsFile("h.json", "0" * 12, heads, (1,), None, None, "g1", policy.id)
    got, m = crossfit_matrix(policy, ex, items, hf)
    assert len(got) == len(pairs) and not np.isnan(m).any()
    col = m[:, policy.predicate_names.index(zero_shot)]
    assert col == pytest.approx(renormalise(-0.5, -1.0))


@pytest.mark.slow
def test_fit_heads_asks_each_question_only_where_it_is_read(embedded_backend_bf16, tmp_path):
    """The cross-fit's extraction on the real model: a head with mode ``both`` has its
    question asked of every training item of its scope; a predicate without a head is
    asked of the scored pairs only; a state head's predicate is never asked; the pair read
    is taken only because a head reads it. What is stored is enough for the cross-fit."""
    from plguard.config import GroundingConfig
    from plguard.policy import load_policy
    from plguard_lab.studies.heads.thresholds import (
        crossfit_matrix,
        extract_for_thresholds,
        outcome_pairs,
        pair_requests,
        prompt_group,
        sample_prompts,
    )
    from plguard_lab.training.features import FeatureStore

    policy = load_policy("minimal")
    every = load_corpus(["xstest"], "dev")
    first = sorted({it.prompt_id for it in every})[:12]
    items = [it for it in every if it.prompt_id in first]  # 12 prompts, 60 answers
    keep = sample_prompts(items, 4)
    pairs = outcome_pairs(items, keep)
    reqs = pair_requests(items, pairs)
    scored = [*pairs, *{prompt_group(p): reqs[prompt_group(p)] for p in pairs}.values()]
    h = {"C": 1.0}
    heads = {"request_is_harmful": Head("prefix", 2, "both", np.zeros(577), 0.0, (1.0, 0.0),
                                        info=h),
             "request_is_benign_sensitive_context": Head("pair_prefix", 2, "head",
                                                         np.zeros(576), 0.0, (1.0, 0.0), info=h),
             "response_provides_harmful_instructions": Head("pool", 2, "head", np.zeros(576),
                                                            0.0, (1.0, 0.0), info=h)}
    hf = HeadsFile("h.json", "0" * 12, heads, (2,), None, None, "g1", policy.id)
    store = FeatureStore(tmp_path / "f.sqlite")
    ex = extract_for_thresholds(policy, hf, embedded_backend_bf16, GroundingConfig(), store,
                                (2,), items, scored, progress=False)

    def asked(name, its):
        block = ex.grounder.question_block(policy.predicate(name),
                                           policy.predicate(name).question)
        have = store.has([ex.question_key(it, block) for it in its])
        return [ex.question_key(it, block) in have for it in its]

    requests = [it for it in items if it.response is None]
    answers = [it for it in items if it.response is not None]
    unscored = [it for it in answers if it.uid not in {p.uid for p in pairs}]
    assert pairs and unscored and requests
    assert all(asked("request_is_harmful", requests))  # mode both: every training request
    assert not any(asked("request_is_benign_sensitive_context", requests))  # a state head
    assert not any(asked("response_provides_harmful_instructions", answers))
    assert all(asked("response_refuses", pairs))  # no head: zero-shot, the scored pairs
    assert not any(asked("response_refuses", unscored))
    for keys in ([ex.pair_key(it) for it in requests], [ex.pool_key(it) for it in answers]):
        assert store.has(keys) == set(keys)  # (two answers of one prompt may share a key)
    got, m = crossfit_matrix(policy, ex, items, hf, folds=2, prompt_ids=keep)
    assert len(got) == len(pairs) and not np.isnan(m).any()

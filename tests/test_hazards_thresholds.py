"""The hazards bundle's moderation threshold: cross-fitted dev requests, a false-positive cap."""

from __future__ import annotations

import numpy as np
import pytest

from plguard.heads.artefact import Head, HeadsFile
from plguard_lab.studies.hazards.items import UNCATEGORISED
from plguard_lab.training.corpus import load_corpus
from plguard_lab.training.features import Feature
from tests.heads.fakes import FakeExtractor

SOURCES = ("xstest", "ailuminate", "coconot", "coconot_plain", "coconot_hazards")


def test_threshold_caps_each_benign_groups_false_positives():
    from plguard_lab.studies.hazards.thresholds import pick_threshold

    rng = np.random.default_rng(0)
    groups = ["coconot_contrast"] * 40 + ["xstest_safe"] * 60 + ["S1"] * 50
    s = np.concatenate([rng.uniform(0, 0.6, 40), rng.uniform(0, 0.9, 60),
                        rng.uniform(0.3, 1.0, 50)])
    got = pick_threshold(s, groups, max_fp=0.05)
    t = got["unsafe"]
    g = np.array(groups)
    for b, n in (("coconot_contrast", 40), ("xstest_safe", 60)):
        flagged = int((s[g == b] >= t).sum())
        assert flagged <= 0.05 * n and got["dev_flagged"][b] == flagged / n
    # The lowest such threshold: the next benign score below it would break the cap.
    xs = s[g == "xstest_safe"]
    below = xs[xs < t].max()
    assert (xs >= below).sum() > 0.05 * 60
    assert got["dev_recall"] == pytest.approx(float((s[g == "S1"] >= t).mean()))
    with pytest.raises(ValueError, match="benign"):
        pick_threshold(s[g == "S1"], ["S1"] * 50)
    # Harmful requests of no one category: reported, but neither capped nor in the recall,
    # and not enough alone to fit a threshold on.
    more = pick_threshold(np.concatenate([s, np.ones(10)]), groups + ["xstest_unsafe"] * 10,
                          max_fp=0.05)
    assert more["unsafe"] == t and more["dev_recall"] == got["dev_recall"]
    assert more["dev_flagged"]["xstest_unsafe"] == 1.0 and more["n"] == got["n"]
    with pytest.raises(ValueError, match="category"):
        pick_threshold(np.r_[s[g == "xstest_safe"], np.ones(5)],
                       ["xstest_safe"] * 60 + ["xstest_unsafe"] * 5)


class _Extractor(FakeExtractor):
    """Random states per request text (what the real store keys a prefix by)."""

    def __init__(self, items, d=512, seed=0):
        rng = np.random.default_rng(seed)
        self.by_text = {t: rng.normal(size=(1, d)).astype(np.float32)
                        for t in sorted({it.request for it in items})}
        super().__init__({k: Feature(self.by_text[it.request], -3.0, 0.0)
                          for it in items for k in self.keys(it)})

    def keys(self, it):
        return [f"{it.request}/prefix", f"{it.request}/q"]


def test_crossfit_request_scores_are_not_in_sample():
    """Random states carry no signal: a head scoring its own training requests memorises
    them, a cross-fitted one must not (this fails if a fold's requests leak into its head)."""
    from plguard.policy import load_policy
    from plguard_lab.studies.hazards.thresholds import crossfit_requests
    from plguard_lab.studies.quality.report import fast_auroc
    from plguard_lab.training.fit import fixed_model, labels_for

    policy = load_policy("hazards")
    corpus = load_corpus(("ailuminate", "coconot", "coconot_plain"), "dev", 80)
    reqs = [it for it in corpus if it.response is None]
    ex = _Extractor(corpus)
    names = [s.name for s in policy.predicates if s.scope == "request"]
    labels = labels_for(policy, reqs)
    headed = [n for n in names if np.nansum(labels[n]) >= 10]
    assert len(headed) >= 2
    heads = {n: Head("prefix", 1, "head", np.zeros(512), 0.0, (1.0, 0.0), info={"C": 100.0})
             for n in headed}
    hf = HeadsFile("h.json", "0" * 12, heads, (1,), None, None, "g1", policy.id)
    crossfit = crossfit_requests(policy, ex, corpus, reqs, hf)
    assert crossfit.shape == (len(reqs), len(names))
    X = np.concatenate([ex.by_text[it.request] for it in reqs])
    for n in headed:
        y = labels[n]
        known = ~np.isnan(y)
        insample = fixed_model(100.0).fit(X[known], y[known].astype(int)).decision_function(X)
        assert fast_auroc(y[known], insample[known]) > 0.95  # memorised
        assert fast_auroc(y[known], crossfit[known, names.index(n)]) < 0.7  # no signal
    # A predicate without a head keeps its raw zero-shot P (sigmoid(-3)).
    k = names.index("request_seeks_code_interpreter_abuse")
    assert np.allclose(crossfit[:, k], 1 / (1 + np.exp(3.0)))


def _joint_setup():
    """hazards, a small dev corpus of three sources, its requests, random states, the
    request predicates and their labels: what the joint cross-fit tests share."""
    from plguard.policy import load_policy
    from plguard_lab.training.fit import labels_for

    policy = load_policy("hazards")
    corpus = load_corpus(("ailuminate", "coconot", "coconot_plain"), "dev", 80)
    reqs = [it for it in corpus if it.response is None]
    names = [s.name for s in policy.predicates if s.scope == "request"]
    return policy, corpus, reqs, _Extractor(corpus, d=16), names, labels_for(policy, reqs)


def _joint_heads(policy, joint, shipped):
    """A heads file whose ``shipped`` categories carry the joint recipe over ``joint``."""
    heads = {n: Head("prefix", 1, "head", np.zeros(16), 0.0, (1.0, 0.0),
                     info={"C": 1.0, "joint": joint}) for n in shipped}
    return HeadsFile("h.json", "0" * 12, heads, (1,), None, None, "g1", policy.id)


def test_crossfit_by_source_scores_each_source_with_heads_that_never_saw_it():
    """Joint category heads refitted per held-out source: a category only one source teaches
    cannot be named for that source's requests (P 0), while folds of request texts, which
    keep the source in training, do name it."""
    from plguard_lab.studies.hazards.thresholds import crossfit_requests

    policy, corpus, reqs, ex, names, labels = _joint_setup()
    src = np.array([it.source for it in reqs])
    taught = [n for n in names if np.nansum(labels[n]) >= 3]
    only_ail = [n for n in taught if np.nansum(labels[n][src != "ailuminate"]) == 0]
    assert only_ail and len(taught) > len(only_ail)
    hf = _joint_heads(policy, taught, taught)
    by_text = crossfit_requests(policy, ex, corpus, reqs, hf)
    by_source = crossfit_requests(policy, ex, corpus, reqs, hf, by_source=True)
    ail = src == "ailuminate"
    for n in only_ail:
        k = names.index(n)
        assert (by_source[ail, k] == 0.0).all() and (by_text[ail, k] > 0.0).all()
    # A category the other sources teach is still scored for ailuminate's requests.
    other = [n for n in taught if n not in only_ail]
    assert (by_source[np.ix_(ail, [names.index(n) for n in other])] > 0.0).any()


def test_a_category_shipped_zero_shot_keeps_its_reading_in_the_crossfit():
    """heads fit may fit the multinomial over every category yet ship a category zero-shot
    (its head below the floor). The guard then reads that category's question, so the
    threshold's cross-fit must too, not the refitted multinomial (a threshold fitted on the
    multinomial's P flagged 77% of benign texts at run time)."""
    from plguard_lab.studies.hazards.thresholds import crossfit_requests

    policy, corpus, reqs, ex, names, labels = _joint_setup()
    taught = [n for n in names if np.nansum(labels[n]) >= 3]
    assert len(taught) >= 3
    dropped = taught[:2]  # the first too: the recipe must come from a head the file has
    hf = _joint_heads(policy, taught, [n for n in taught if n not in dropped])
    got = crossfit_requests(policy, ex, corpus, reqs, hf)
    for n in dropped:  # its raw zero-shot P (sigmoid(-3)), as the guard reads it
        assert np.allclose(got[:, names.index(n)], 1 / (1 + np.exp(3.0))), n
    kept = [names.index(n) for n in taught if n not in dropped]
    assert not np.allclose(got[:, kept], 1 / (1 + np.exp(3.0)))  # the multinomial's P


def test_zero_shot_categories_are_read_through_their_dev_platt_maps():
    """A category left to its question gets a Platt map fitted on the dev items' groups:
    an informative reading keeps its order (out of fold for the threshold), one that points
    the wrong way becomes the flat base rate, headed and non-category predicates are left
    as they are."""
    from plguard.policy import load_policy
    from plguard_lab.studies.hazards.items import test_items
    from plguard_lab.studies.hazards.thresholds import zero_shot_maps
    from plguard_lab.studies.quality.platt import apply_platt
    from plguard_lab.training.joint import category_predicates

    policy = load_policy("hazards")
    names = [s.name for s in policy.predicates if s.scope == "request"]
    codes = category_predicates(policy)
    good, bad, headed = "request_seeks_self_harm", "request_sexualises_minors", \
        "request_seeks_violent_crime"
    items = test_items("dev")
    groups = np.array([it.fields["group"] for it in items])
    rng = np.random.default_rng(0)
    probs = rng.uniform(0.2, 0.35, size=(len(items), len(names)))  # uninformative
    gi, bi = names.index(good), names.index(bad)
    probs[groups == codes[good], gi] += 0.3  # reads its category's items higher
    probs[groups == codes[bad], bi] -= 0.15  # reads them lower
    hf = HeadsFile("h.json", "0" * 12, {headed: Head("prefix", 1, "head", np.zeros(4), 0.0,
                                                     (1.0, 0.0))},
                   (1,), None, None, "g1", policy.id)
    from plguard.config import GroundingConfig

    maps, out = zero_shot_maps(policy, hf, probs, items, names, GroundingConfig())
    assert good in maps and bad in maps and headed not in maps
    assert set(maps) <= set(codes) and set(maps) == {n for n in codes if n != headed
                                                   and (groups == codes[n]).sum() >= 2}
    assert maps[good]["a"] > 0 and maps[good]["category"] == codes[good]
    assert maps[bad]["a"] == 0.0 and "not positive" in maps[bad]["fitted"] and maps[bad]["flat"]
    # Fitted on the items of a known category or none: the harmful ones of no one category
    # could be of this one, so they sit on neither side.
    known = ~np.isin(groups, UNCATEGORISED)
    assert (~known).sum() > 50 and maps[bad]["n"] == known.sum()
    rate = (groups[known] == codes[bad]).mean()
    assert 1 / (1 + np.exp(-maps[bad]["b"])) == pytest.approx(rate, rel=0.02)
    assert np.ptp(out[:, bi]) < 0.01  # flat in every fold
    assert np.array_equal(out[:, names.index(headed)], probs[:, names.index(headed)])
    # Out of fold: no item is scored by the map fitted on all of dev, which it helped fit.
    assert not np.allclose(out[:, gi], apply_platt(probs[:, gi], maps[good]["a"],
                                                   maps[good]["b"]))
    from plguard_lab.studies.quality.report import fast_auroc

    y = groups == codes[good]
    assert fast_auroc(y, out[:, gi]) > 0.95 and out[y, gi].mean() > out[~y, gi].mean()


def test_zero_shot_columns_are_read_by_question_key_whatever_the_extractor_asks():
    """fit-heads hands the cross-fit an extractor that asks no question itself (the states'
    one; the questions were asked by others, under the same keys): the zero-shot columns
    are found by their question's key (an IndexError before)."""
    from plguard.policy import load_policy
    from plguard.types import renormalise
    from plguard_lab.studies.hazards.metrics import unsafe_inputs
    from plguard_lab.studies.hazards.report import request_matrix

    class _StatesOnly(FakeExtractor):
        with_questions = False

        def keys(self, it):
            return [f"{it.uid}/prefix"]

        def question_key(self, it, block):
            return f"{it.uid}/q"

    policy = load_policy("hazards")
    items = [it for it in load_corpus(["ailuminate"], "dev", 5)]
    ex = _StatesOnly({f"{it.uid}/{s}": Feature(np.zeros((1, 4), np.float32), -0.5, -1.0)
                      for it in items for s in ("prefix", "q")})
    hf = HeadsFile("h.json", "0" * 12, {}, (1,), None, None, "g1", policy.id)
    m = request_matrix(policy, ex, items, hf)
    names = [s.name for s in policy.predicates if s.scope == "request"]
    read = [j for j, n in enumerate(names) if n in unsafe_inputs(policy)]
    assert read and m[:, read] == pytest.approx(renormalise(-0.5, -1.0))

"""Joint category heads (plguard_lab.training.joint): one multinomial over a bundle's categories."""

from __future__ import annotations

import numpy as np
import pytest

from plguard_lab.training.corpus import CorpusItem
from plguard_lab.training.features import Feature
from tests.heads.fakes import FakeExtractor

# AILuminate hazards of the synthetic set: violent crimes and weapons overlap by
# construction (gold.yaml leaves each unknown for the other), defamation does not.
HAZARDS = {"vcr": "request_seeks_violent_crime", "iwp": "request_seeks_indiscriminate_weapons",
           "dfm": "request_seeks_defamation"}


@pytest.fixture(scope="module")
def hazards():
    from plguard.policy import load_policy

    return load_policy("hazards")


def _synthetic(n: int = 40, d: int = 6, seed: int = 0):
    """Benign requests near 0; each hazard a cluster; vcr and iwp share a direction."""
    rng = np.random.default_rng(seed)
    centres = {"vcr": np.eye(d)[0] * 3, "iwp": (np.eye(d)[0] + np.eye(d)[1]) * 3,
               "dfm": np.eye(d)[2] * 3}
    items, feats = [], {}
    for kind, c in [("safe", np.zeros(d)), *centres.items()]:
        for i in range(n):
            uid = f"{kind}/{i}"
            fields = ({"label": "safe", "type": "contrast_safe", "harm": frozenset()}
                      if kind == "safe" else
                      {"label": "unsafe", "type": f"ailuminate_{kind}", "harm": frozenset()})
            items.append(CorpusItem(uid, "ailuminate" if kind != "safe" else "xstest", uid,
                                    f"request {uid}", None, fields))
            state = (c + rng.normal(0, 0.7, d)).astype(np.float32)
            feats[f"{uid}/prefix"] = Feature(state[None, :], 0.0, 0.0)
    return items, feats


def test_category_predicates_are_the_tagged_rules_request_predicates(hazards):
    from plguard_lab.training.joint import category_predicates

    cats = category_predicates(hazards)
    assert cats["request_seeks_violent_crime"] == "S1"
    assert cats["request_seeks_code_interpreter_abuse"] == "S14"
    assert cats["request_treats_assistant_as_human"] == "X2"
    assert len(cats) == 16 and len(set(cats.values())) == 16
    # Request predicates no category rule names, and every response predicate, are not.
    assert "request_is_educational_or_protective" not in cats
    assert all(hazards.predicate(n).scope == "request" for n in cats)


def test_joint_heads_rank_the_own_category_first_and_benign_requests_low(hazards):
    from plguard_lab.training.fit import labels_for
    from plguard_lab.training.joint import category_predicates, fit_joint_heads

    items, feats = _synthetic()
    names = list(category_predicates(hazards))
    fits, summary = fit_joint_heads(hazards, FakeExtractor(feats), items,
                                    labels_for(hazards, items), names)
    by = {f.name: f for f in fits}
    assert set(summary["classes"]) == set(HAZARDS.values())  # only those with positives
    assert all(by[n].head is None and "zero-shot" in by[n].skipped
               for n in names if n not in HAZARDS.values())
    assert summary["cv_top1"] >= 0.9
    heads = {n: by[n].head for n in HAZARDS.values()}
    assert all(h["readout"] == "prefix" and h["mode"] == "head" for h in heads.values())

    from plguard.heads.artefact import decode_vector

    def z(name: str, x: np.ndarray) -> float:
        h = heads[name]
        return float(decode_vector(h["weights"]) @ x + h["bias"])

    hits = 0
    for it in items:
        x = feats[f"{it.uid}/prefix"].states[0].astype(np.float64)
        scores = {n: z(n, x) for n in heads}
        if it.fields["label"] == "safe":
            assert max(scores.values()) < 0  # below `none` on every category
        else:
            hits += max(scores, key=lambda n: scores[n]) == HAZARDS[it.fields["type"][11:]]
    assert hits >= 0.95 * 3 * 40
    # Every head's probability comes from a Platt map on out-of-fold logits, and its
    # cross-validated AUROC against the predicate's known labels is reported.
    assert all(by[n].cv_auroc > 0.9 and by[n].head["platt"]["a"] > 0 for n in heads)


def test_fit_options_refuse_joint_heads_without_a_request_prompt_readout():
    from plguard.backends.base import Capabilities
    from plguard.config import GuardConfig
    from plguard.errors import ConfigError
    from plguard_lab.training.train import FitOptions, fit_heads

    class NoForward:  # declares hidden states; the check comes before any model work
        capabilities = Capabilities(hidden_states=True)

    with pytest.raises(ConfigError, match="prefix or pool readout"):
        fit_heads(GuardConfig.from_dict({"policy": "hazards"}), "unused.json",
                  FitOptions(readouts=("question",), joint_categories=True),
                  backend=NoForward())
    with pytest.raises(ConfigError, match="tags no unsafe rule"):
        fit_heads(GuardConfig.from_dict({"policy": "minimal"}), "unused.json",
                  FitOptions(joint_categories=True), backend=NoForward())


def test_one_category_is_the_binary_head_against_none(hazards):
    from plguard.heads.artefact import decode_vector
    from plguard_lab.training.fit import labels_for
    from plguard_lab.training.joint import category_predicates, fit_joint_heads

    items, feats = _synthetic()
    items = [it for it in items if it.fields["type"] in ("contrast_safe", "ailuminate_dfm")]
    fits, summary = fit_joint_heads(hazards, FakeExtractor(feats), items,
                                    labels_for(hazards, items),
                                    list(category_predicates(hazards)))
    assert summary["classes"] == ["request_seeks_defamation"]
    h = next(f for f in fits if f.name == "request_seeks_defamation").head
    w = decode_vector(h["weights"])
    z = [float(w @ feats[f"{it.uid}/prefix"].states[0] + h["bias"]) for it in items]
    # Defamation above none, benign requests below (clusters 3 apart, noise 0.7).
    assert sum(v <= 0 for v in z[40:]) + sum(v >= 0 for v in z[:40]) <= 3

    none, _ = fit_joint_heads(hazards, FakeExtractor(feats), items[:40],
                              labels_for(hazards, items[:40]), ["request_seeks_defamation"])
    assert none[0].head is None and "zero-shot" in none[0].skipped


def test_threshold_targets_are_named():
    from plguard.config import GuardConfig
    from plguard.errors import ConfigError
    from plguard.heads.artefact import load_heads, shipped_heads
    from plguard_lab.studies.heads.thresholds import fit_heads_thresholds

    path = shipped_heads("hazards")
    assert any(h.info.get("joint") for h in load_heads(path).heads.values())
    cfg = GuardConfig.from_dict({"policy": "hazards"})
    with pytest.raises(ConfigError, match="use moderation, pairs, both"):
        fit_heads_thresholds(cfg, path, "unused.json", target="guard", backend=object())


def test_pair_thresholds_need_xstest_before_any_fit(tmp_path):
    import json

    from plguard.config import GuardConfig
    from plguard.errors import ConfigError
    from plguard.heads.artefact import shipped_heads
    from plguard_lab.studies.heads.thresholds import fit_heads_thresholds

    doc = json.loads(shipped_heads("hazards").read_text())
    doc["training"]["sources"] = ["ailuminate", "coconot"]
    heads = tmp_path / "heads.json"
    heads.write_text(json.dumps(doc))
    cfg = GuardConfig.from_dict({"policy": "hazards"})
    # Refused before the moderation half runs (a backend of object() would fail there).
    for target in ("pairs", "both"):
        with pytest.raises(ConfigError, match="names no XSTest source"):
            fit_heads_thresholds(cfg, heads, tmp_path / "cal.json", target=target,
                                 backend=object())
    assert not (tmp_path / "cal.json").exists()


def test_joint_fit_chooses_the_readout_that_carries_the_categories(hazards):
    from plguard_lab.training.fit import labels_for
    from plguard_lab.training.joint import category_predicates, fit_joint_heads

    items, feats = _synthetic()
    # The categories move to the pool state; the prefix state becomes noise.
    rng = np.random.default_rng(1)
    for it in items:
        feats[f"{it.uid}/pool"] = feats[f"{it.uid}/prefix"]
        feats[f"{it.uid}/prefix"] = Feature(rng.normal(0, 1, (1, 6)).astype(np.float32),
                                            0.0, 0.0)
    ex = FakeExtractor(feats)
    ex.with_pool = True
    names, labels = list(category_predicates(hazards)), labels_for(hazards, items)
    fits, summary = fit_joint_heads(hazards, ex, items, labels, names,
                                    readouts=("prefix", "pool"))
    assert summary["readout"] == "pool" and summary["cv_top1"] >= 0.9
    assert {f.head["readout"] for f in fits if f.head is not None} == {"pool"}
    assert {k.split("@")[0] for k in summary["candidates"]} == {"prefix", "pool"}
    _, noise = fit_joint_heads(hazards, ex, items, labels, names, readouts=("prefix",))
    assert noise["readout"] == "prefix" and noise["cv_top1"] < 0.6
    ex.with_pool = False
    with pytest.raises(ValueError, match="pool states"):
        fit_joint_heads(hazards, ex, items, labels, names, readouts=("pool",))


def test_joint_heads_are_chosen_and_measured_by_held_out_source(hazards):
    from dataclasses import replace

    from plguard_lab.training.fit import labels_for
    from plguard_lab.training.joint import category_predicates, fit_joint_heads

    items, feats = _synthetic()
    labels = labels_for(hazards, items)
    # Three sources, each with benign requests and every hazard, except that defamation
    # lives in s3 alone: no other source teaches it there.
    def src(i: int, it: CorpusItem) -> str:
        return "s3" if it.fields["type"] == "ailuminate_dfm" else f"s{i % 3 + 1}"

    items = [replace(it, source=src(i, it)) for i, it in enumerate(items)]
    names = list(category_predicates(hazards))
    vcr, dfm = HAZARDS["vcr"], HAZARDS["dfm"]
    # A zero-shot reading that knows violent crime perfectly: the floor its head must hold.
    zs = {n: np.full(len(items), np.nan) for n in names}
    zs[vcr] = np.array([10.0 if it.fields["type"] == "ailuminate_vcr" else -10.0
                        for it in items])
    fits, summary = fit_joint_heads(hazards, FakeExtractor(feats), items, labels, names,
                                    zero_shot=zs)
    by = {f.name: f for f in fits}
    assert summary["selected_by"] == "held out by source"
    assert all("mean_worst_heldout" in c for c in summary["candidates"].values())
    iwp = by[HAZARDS["iwp"]]
    assert set(iwp.heldout) == {"s1", "s2", "s3"} and iwp.worst_source
    assert iwp.head is not None and iwp.cv_auroc == min(iwp.heldout.values()) > 0.8
    # The shared Platt map is fitted on logits that were scored: a class a held-out
    # source's fold never saw (defamation, when s3 is held out) has no logit there, and
    # its sentinel must not flatten the map to 0.5 for every request (a slope of 1e-9).
    platt = iwp.head["platt"]
    assert platt["a"] > 0.1, platt
    p = 1 / (1 + np.exp(-(platt["a"] * np.array([-5.0, 5.0]) + platt["b"])))
    assert p[1] - p[0] > 0.5
    # And it is the item-fold map of the multinomial that ships (fitted on every source),
    # the one the thresholds' cross-fit reads, not a map of held-out-source logits.
    from plguard_lab.training.joint import JointModel

    X = np.stack([feats[f"{it.uid}/prefix"].states[0] for it in items]).astype(np.float64)
    Y = np.column_stack([labels[n] for n in summary["classes"]])
    jm = JointModel(X, Y, summary["C"])
    assert platt == {"a": pytest.approx(float(jm.platt.coef_[0][0])),
                     "b": pytest.approx(float(jm.platt.intercept_[0]))}
    # Defamation is measured where another source teaches it: nowhere but s3's own items.
    assert all(np.isnan(v) for v in by[dfm].heldout.values())
    # Violent crime's head holds near zero-shot's perfect reading, within the tolerance.
    f = by[vcr]
    assert f.zero_shot_heldout and f.zero_shot_heldout[f.worst_source] == 1.0
    assert (f.head is None) == (f.cv_auroc < 1.0 - 0.03)
    assert f.choice == ("zero-shot" if f.head is None else "head")


def test_a_category_head_below_zero_shot_on_its_worst_source_is_not_kept(hazards):
    from dataclasses import replace

    from plguard_lab.training.fit import labels_for
    from plguard_lab.training.joint import category_predicates, fit_joint_heads

    items, feats = _synthetic()
    labels = labels_for(hazards, items)
    items = [replace(it, source=f"s{i % 3 + 1}") for i, it in enumerate(items)]
    rng = np.random.default_rng(3)
    for it in items:  # violent crime's states carry nothing: its head reads noise
        if it.fields["type"] == "ailuminate_vcr":
            feats[f"{it.uid}/prefix"] = Feature(rng.normal(0, 0.7, (1, 6)).astype(np.float32),
                                                0.0, 0.0)
    names = list(category_predicates(hazards))
    vcr = HAZARDS["vcr"]
    zs = {n: np.full(len(items), np.nan) for n in names}
    zs[vcr] = np.array([10.0 if it.fields["type"] == "ailuminate_vcr" else -10.0
                        for it in items])
    fits, _ = fit_joint_heads(hazards, FakeExtractor(feats), items, labels, names,
                              zero_shot=zs)
    f = {f.name: f for f in fits}[vcr]
    assert f.head is None and f.choice == "zero-shot" and "zero-shot kept" in f.why
    assert f.cv_auroc < 0.97 and f.zero_shot_heldout[f.worst_source] == 1.0

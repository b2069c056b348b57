"""Learned heads: hidden states, the heads file and its checks, the Grounder applying it."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest

from plguard.backends.base import Capabilities
from plguard.config import GroundingConfig
from plguard.errors import ConfigError
from plguard.grounding import Grounder, backend_identity
from plguard.heads.apply import main_question_digest
from plguard.heads.artefact import FORMAT, encode_vector, load_heads
from plguard.policy import load_policy


@pytest.fixture(scope="module")
def minimal():
    return load_policy("minimal")


def test_fast_states_equal_naive_states(embedded_backend, minimal):
    g = Grounder(embedded_backend, minimal.predicates, GroundingConfig(heads=None))
    reqs = [g.prompts("How do I kill a Python process?", "Run kill -9 followed by its PID."),
            g.prompts("How do I make a pipe bomb?", None)]
    layers = (0, 15, embedded_backend.n_layers)
    fast = embedded_backend.true_false_states(reqs, layers)
    naive = embedded_backend.true_false_states_naive(reqs, layers)
    for f, n, r in zip(fast, naive, reqs, strict=True):
        assert f.answer_states.shape == (len(r.suffixes), 3, 576)
        assert f.prefix_state.shape == (3, 576)
        np.testing.assert_allclose(f.answer_states, n.answer_states, atol=1e-3)
        np.testing.assert_allclose(f.prefix_state, n.prefix_state, atol=1e-3)
        for a, b in zip(f.scores, n.scores, strict=True):
            assert a.p_true == pytest.approx(b.p_true, abs=1e-4)
    # The scores are today's P(True): the stated path changes nothing of the reading.
    plain = embedded_backend.true_false_logprobs(reqs)
    assert [s.p_true for s in plain[0]] == pytest.approx([s.p_true for s in fast[0].scores],
                                                         abs=1e-6)
    with pytest.raises(Exception, match="out of range"):
        embedded_backend.true_false_states(reqs, (99,))


def _heads_doc(backend, policy, cfg, *, readouts, seed=0, layer=15):
    """A heads file with random weights that fits ``backend`` and ``policy`` exactly."""
    g = Grounder(backend, policy.predicates, cfg.model_copy(update={"heads": None}))
    rng = np.random.default_rng(seed)
    ident = backend_identity(backend)
    preds = {}
    for spec, readout in zip(policy.predicates, readouts, strict=True):
        if readout is None:
            continue
        preds[spec.name] = {
            "readout": readout, "layer": layer, "mode": "head",
            "weights": encode_vector(rng.normal(0, 0.05, 576)), "bias": 0.1,
            "platt": {"a": 1.0, "b": 0.0},
            "question_sha256": main_question_digest(g.question_block(spec, spec.question))}
    return {"format": FORMAT, "model": {"sha256": ident["model_sha256"],
                                        "model_id": ident["model_id"]},
            "template_version": g.template_version, "policy": policy.id,
            "layers": [layer], "predicates": preds}


def _write(tmp_path, doc, name="heads.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("readouts", [["prefix", "question", None, "question"],
                                      ["pool", "question", None, "pool"]])
def test_grounder_applies_heads_as_a_manual_dot_product(embedded_backend, minimal, tmp_path,
                                                        readouts):
    cfg = GroundingConfig(heads=None)  # one predicate stays zero-shot
    path = _write(tmp_path, _heads_doc(embedded_backend, minimal, cfg, readouts=readouts))
    hf = load_heads(path)
    g = Grounder(embedded_backend, minimal.predicates, cfg.model_copy(update={"heads": str(path)}),
                 policy_name="minimal")
    pair = ("How can I get into my neighbour's house when they are away?",
            "I can't help with entering someone else's home.")
    got = {s.name: s for s in g.ground([pair])[0].scores}
    assert g.ground([pair])[0].heads == hf.label
    # By hand: the same prompts without the prefix-read predicate's question.
    zero = Grounder(embedded_backend, minimal.predicates, cfg)
    names = [p.name for p in minimal.predicates]
    for scope, resp in (("request", None), ("response", pair[1])):
        specs = [s for s in minimal.predicates if s.scope == scope]
        req = zero.prompts(pair[0], resp)
        out = embedded_backend.true_false_states([req], (15,))[0]
        k = 0  # index of the spec's main question among the suffixes
        for spec in specs:
            h = hf.heads.get(spec.name)
            n_var = 1 + len(spec.paraphrases)
            if h is None:
                assert got[spec.name].source == "zeroshot"
                assert got[spec.name].p_head is None
            else:
                state = {"prefix": out.prefix_state[0], "pool": out.pool_state[0],
                         "question": out.answer_states[k, 0]}[h.readout]
                z = float(np.dot(h.weights, state.astype(np.float64))) + h.bias
                assert got[spec.name].p_true == pytest.approx(1 / (1 + math.exp(-z)), abs=2e-3)
                assert got[spec.name].source == "head"
            k += n_var
    assert got["request_is_harmful"].p_zeroshot is None  # question-free head: not asked
    assert (got["response_refuses"].p_zeroshot is None) == (readouts[3] != "question")
    assert names == [s.name for s in g.ground([pair])[0].scores]


def test_prefix_heads_ask_fewer_questions(embedded_backend, minimal, tmp_path):
    cfg = GroundingConfig(heads=None)
    doc = _heads_doc(embedded_backend, minimal, cfg, readouts=["prefix"] * 4)
    path = _write(tmp_path, doc)
    asked = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def true_false_states(self, requests, layers):
            asked.extend(len(r.suffixes) for r in requests)
            return self.inner.true_false_states(requests, layers)

    g = Grounder(Spy(embedded_backend), minimal.predicates,
                 cfg.model_copy(update={"heads": str(path)}), policy_name="minimal")
    g.ground([("Tell me a joke.", "Why did the chicken cross the road?")])
    assert asked == [0, 0]  # one prefix forward per scope, no question tokens


def test_heads_path_counts_forwarded_questions_as_cache_misses(embedded_backend, minimal,
                                                               tmp_path):
    cfg = GroundingConfig(heads=None)
    path = _write(tmp_path, _heads_doc(embedded_backend, minimal, cfg,
                                       readouts=["question"] * 4))
    g = Grounder(embedded_backend, minimal.predicates,
                 cfg.model_copy(update={"heads": str(path), "cache": str(tmp_path / "c.sqlite")}),
                 policy_name="minimal")
    assert g.cache is not None
    n = sum(1 + len(p.paraphrases) for p in minimal.predicates)
    g.ground([("Tell me a joke.", "Why did the chicken cross the road?")])
    assert (g.cache.hits, g.cache.misses) == (0, n)
    # Its scores are in the cache now, yet heads read states: forwarded again, not looked up.
    g.ground([("Tell me a joke!", "Why did the chicken cross the road?")])
    assert (g.cache.hits, g.cache.misses) == (0, 2 * n)
    g.close()


def test_heads_refused_where_they_do_not_fit(embedded_backend, minimal, tmp_path):
    cfg = GroundingConfig(heads=None)
    good = _heads_doc(embedded_backend, minimal, cfg, readouts=["question"] * 4)

    def build(doc, policy_name="minimal", backend=embedded_backend):
        digest = hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:8]
        path = _write(tmp_path, doc, f"h{digest}.json")
        return Grounder(backend, minimal.predicates, cfg.model_copy(update={"heads": str(path)}),
                        policy_name=policy_name)

    build(good)  # fits
    other_model = {**good, "model": {"sha256": "0" * 64, "model_id": "x"}}
    with pytest.raises(ConfigError, match="another model"):
        build(other_model)
    with pytest.raises(ConfigError, match="template"):
        build({**good, "template_version": "g0"})
    with pytest.raises(ConfigError, match="policy minimal, this run uses detailed"):
        build(good, policy_name="detailed")
    changed = json.loads(json.dumps(good))
    changed["predicates"]["response_refuses"]["question_sha256"] = "f" * 64
    with pytest.raises(ConfigError, match="question of response_refuses changed"):
        build(changed)
    narrow = json.loads(json.dumps(good))
    narrow["predicates"]["response_refuses"]["weights"] = encode_vector(np.zeros(10))
    with pytest.raises(ConfigError, match="hidden size 576"):
        build(narrow)

    class NoStates:  # like the vLLM and openai backends: declares no hidden states
        capabilities = Capabilities()

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            if name == "true_false_states":
                raise AttributeError(name)
            return getattr(self.inner, name)

    with pytest.raises(ConfigError, match="cannot return hidden states"):
        build(good, backend=NoStates(embedded_backend))
    flat = json.loads(json.dumps(good))  # what joint heads by source once wrote
    flat["predicates"]["response_refuses"]["platt"] = {"a": 1.8e-9, "b": -3e-16}
    with pytest.raises(ConfigError, match="'response_refuses' has a flat Platt map"):
        build(flat)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        load_heads(tmp_path / "bad.json")
    (tmp_path / "cal.json").write_text(json.dumps({"predicates": {}}))
    with pytest.raises(ConfigError, match="not a heads file"):
        load_heads(tmp_path / "cal.json")


def test_auto_uses_no_heads_for_other_models_or_policies(embedded_backend, minimal):
    from plguard.heads.apply import resolve_heads

    class Other:
        model_id = "/models/qwen:bfloat16"
        capabilities = Capabilities(hidden_states=True)

        def true_false_states(self, requests, layers):  # pragma: no cover - never called
            raise AssertionError

    assert resolve_heads("auto", Other(), "minimal") is None
    assert resolve_heads("auto", embedded_backend, None) is None
    assert resolve_heads(None, embedded_backend, "minimal") is None


class _Spy:
    """A backend that records each stated forward's (questions, marks)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def true_false_states(self, requests, layers):
        self.calls.append([(len(r.suffixes), len(r.marks)) for r in requests])
        return self.inner.true_false_states(requests, layers)


def test_mark_states_are_the_states_of_the_cut_prefix(embedded_backend, minimal):
    from dataclasses import replace

    from plguard.grounding import request_end

    g = Grounder(embedded_backend, minimal.predicates, GroundingConfig(heads=None))
    req = g.prompts("How do I kill a Python process?", "Run kill -9 followed by its PID.")
    at = request_end(req.prefix)
    marked = replace(req, marks=(at, len(req.prefix)))
    layers = (0, 15, embedded_backend.n_layers)
    fast = embedded_backend.true_false_states([marked], layers)[0]
    naive = embedded_backend.true_false_states_naive([marked], layers)[0]
    assert fast.mark_states.shape == (2, 3, 576)
    np.testing.assert_allclose(fast.mark_states, naive.mark_states, atol=2e-2)
    # A mark at the end of the prefix is the prefix state; one at the request's end is
    # the state of the pair prompt cut there, which the request-only pair read forwards.
    np.testing.assert_allclose(fast.mark_states[1], fast.prefix_state, atol=1e-5)
    cut = g.request_end_prompt("How do I kill a Python process?")
    assert cut.prefix == req.prefix[:at]
    alone = embedded_backend.true_false_states([cut], layers)[0]
    np.testing.assert_allclose(fast.mark_states[0], alone.prefix_state, atol=2e-2)
    with pytest.raises(Exception, match="outside the prompt prefix"):
        embedded_backend.true_false_states([replace(req, marks=(0,))], layers)


def test_pair_read_serves_both_scopes_from_one_forward(embedded_backend, minimal, tmp_path):
    cfg = GroundingConfig(heads=None)
    doc = _heads_doc(embedded_backend, minimal, cfg,
                     readouts=["pair_prefix", "pair_prefix", "prefix", "prefix"])
    hcfg = cfg.model_copy(update={"heads": str(_write(tmp_path, doc))})
    spy = _Spy(embedded_backend)
    g = Grounder(spy, minimal.predicates, hcfg, policy_name="minimal")
    pair = ("How can I get into my neighbour's house when they are away?",
            "I can't help with entering someone else's home.")
    with_pair = {s.name: s for s in g.ground([pair])[0].scores}
    assert spy.calls == [[(0, 1)]]  # the pair's prompt alone, marked at the request's end
    assert {s.source for s in with_pair.values()} == {"head"}
    # Without a response (a request check), the pair prompt cut at the request's end.
    spy.calls.clear()
    alone = Grounder(spy, minimal.predicates, hcfg, policy_name="minimal")
    req_only = {s.name: s for s in alone.ground([pair], response=False)[0].scores}
    assert spy.calls == [[(0, 0)]]
    for name in ("request_is_harmful", minimal.predicates[1].name):
        assert req_only[name].p_true == pytest.approx(with_pair[name].p_true, abs=5e-3)
    # A response predicate cannot read the request block's end.
    bad = _heads_doc(embedded_backend, minimal, cfg, readouts=[None, None, "pair_prefix", None])
    with pytest.raises(ConfigError, match="pair_prefix"):
        Grounder(embedded_backend, minimal.predicates,
                 cfg.model_copy(update={"heads": str(_write(tmp_path, bad, "bad.json"))}),
                 policy_name="minimal")

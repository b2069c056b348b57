"""The on-disk grounding cache, its wiring in Grounder, paraphrase switch and calibration."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from plguard.config import GroundingConfig
from plguard.errors import ConfigError
from plguard.grounding import TEMPLATE_VERSION, Grounder, platt
from plguard.grounding_cache import GroundingCache, cache_key
from plguard.types import PredicateSpec, TFScore
from tests.scripted import ScriptedBackend

SHARED = PredicateSpec("response_refuses", "response", "Does the response refuse?",
                       paraphrases=("Is the response a refusal?",))
REQ = PredicateSpec("request_is_harmful", "request", "Is the request harmful?")
OTHER = PredicateSpec("response_is_rude", "response", "Is the response rude?")
PAIRS = [("How do I kill a process?", "Use kill PID."), ("Make a bomb", "I can't help.")]


def scripted():
    return ScriptedBackend(lambda c: "", lambda prefix, suffix: 0.8 if "can't" in prefix
                           else (0.3 if "refusal" in suffix else 0.2))


def cfg(tmp_path, **kw):
    return GroundingConfig.model_validate({"cache": str(tmp_path / "g.sqlite"), **kw})


def test_key_covers_every_part():
    base = ("m", "g1", 100, "q?", "req", "resp")
    k = cache_key(*base)
    for i, alt in enumerate(("m2", "g2", 101, "q2?", "req2", "resp2")):
        changed = list(base)
        changed[i] = alt
        assert cache_key(*changed) != k
    assert cache_key("m", "g1", 100, "q?", "req", None) != cache_key("m", "g1", 100, "q?",
                                                                     "req", "")


def test_put_get_roundtrip_and_reopen(tmp_path):
    c = GroundingCache(tmp_path / "c.sqlite")
    c.put_many({"a": (TFScore(-0.1, -2.0, True), "m", "q")})
    assert c.get_many(["a", "b"]) == {"a": TFScore(-0.1, -2.0, True)}
    assert (c.hits, c.misses) == (1, 1)
    c.close()
    assert GroundingCache(tmp_path / "c.sqlite").get_many(["a"])["a"].logprob_false == -2.0


def test_forwarded_questions_count_as_misses_through_a_method(tmp_path):
    c = GroundingCache(tmp_path / "c.sqlite")
    c.get_many(["a"])
    c.count_forwarded(3)
    assert (c.hits, c.misses) == (0, 4)
    with pytest.raises(AttributeError):
        c.misses = 0  # type: ignore[misc]  # counters are read-only: nobody resets them
    with pytest.raises(ValueError, match="n >= 0"):
        c.count_forwarded(-1)


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "c.sqlite"
    GroundingCache(path)

    def writer(w: int) -> None:
        c = GroundingCache(path)  # own connection per thread, like separate processes
        for i in range(40):
            c.put_many({f"{w}-{i}": (TFScore(-1.0, -1.0), "m", "q")})

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(GroundingCache(path)) == 160


def test_interrupted_writer_keeps_committed_rows(tmp_path):
    path = tmp_path / "c.sqlite"
    code = ("import os; from plguard.grounding_cache import GroundingCache as G; "
            "from plguard.types import TFScore as T; c = G(" + repr(str(path)) + "); "
            "c.put_many({'k1': (T(-1.0, -2.0), 'm', 'q')}); "
            "c.put_many({'k2': (T(-1.0, -2.0), 'm', 'q')}); os._exit(9)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    assert set(GroundingCache(path).get_many(["k1", "k2"])) == {"k1", "k2"}


def test_shared_predicate_grounded_once_across_policies(tmp_path):
    backend = scripted()
    a = Grounder(backend, [REQ, SHARED], cfg(tmp_path))
    b = Grounder(backend, [SHARED, OTHER], cfg(tmp_path))
    ga = a.ground(PAIRS)
    assert sum(backend.score_calls) == 2 * 1 + 2 * 2  # 2 requests x 1 + 2 pairs x 2 variants
    gb = b.ground(PAIRS)
    # Policy b only adds its own question; the shared predicate and its paraphrase are cached.
    assert sum(backend.score_calls) == 6 + 2 * 1
    assert gb[1].probs["response_refuses"] == ga[1].probs["response_refuses"]
    c = Grounder(backend, [REQ, SHARED, OTHER], cfg(tmp_path))
    c.ground(PAIRS)
    assert sum(backend.score_calls) == 8  # a third policy of known questions: no calls


def test_cache_off_by_default_and_uncached_scores_match(tmp_path):
    backend = scripted()
    plain = Grounder(backend, [REQ, SHARED]).ground(PAIRS)
    assert Grounder(backend, [REQ, SHARED]).cache is None
    cached = Grounder(backend, [REQ, SHARED], cfg(tmp_path)).ground(PAIRS)
    again = Grounder(backend, [REQ, SHARED], cfg(tmp_path)).ground(PAIRS)
    assert plain == cached == again


def test_paraphrases_switch_and_spread(tmp_path):
    backend = scripted()
    with_p = Grounder(backend, [SHARED], cfg(tmp_path)).ground(PAIRS[:1])[0].scores[0]
    assert len(with_p.variants) == 2
    assert with_p.variant_spread == pytest.approx(0.1)
    n = sum(backend.score_calls)
    without = Grounder(backend, [SHARED], cfg(tmp_path, paraphrases=False)).ground(PAIRS[:1])
    s = without[0].scores[0]
    assert sum(backend.score_calls) == n  # the main question's row is reused
    assert (s.variants, s.variant_spread) == ((), 0.0)
    assert s.p_true == pytest.approx(0.2)


def test_calibration_applied_and_raw_logprobs_kept(tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"predicates": {"response_refuses": {"a": 2.0, "b": -1.0}}}))
    backend = scripted()
    raw = Grounder(backend, [SHARED, OTHER]).ground(PAIRS[:1])[0]
    cal = Grounder(backend, [SHARED, OTHER],
                   GroundingConfig(calibration=str(path))).ground(PAIRS[:1])[0]
    r, c = raw.scores[0], cal.scores[0]
    assert c.p_true == pytest.approx(platt(r.p_true, 2.0, -1.0))
    assert (c.logprob_true, c.logprob_false) == (r.logprob_true, r.logprob_false)
    assert cal.scores[1] == raw.scores[1]  # no entry: unchanged
    path.write_text("{}")
    with pytest.raises(ConfigError, match="predicates"):
        Grounder(backend, [SHARED], GroundingConfig(calibration=str(path)))


class CountingBackend:
    """A real backend that counts scored questions."""

    def __init__(self, inner):
        self.inner, self.model_id, self.questions = inner, inner.model_id, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def true_false_logprobs(self, requests):
        self.questions += sum(len(r.suffixes) for r in requests)
        return self.inner.true_false_logprobs(requests)


def test_second_grounder_over_cache_makes_no_model_calls(embedded_backend, tmp_path):
    from plguard.policy import load_policy

    preds = load_policy("minimal").predicates
    first = CountingBackend(embedded_backend)
    g1 = Grounder(first, preds, cfg(tmp_path)).ground(PAIRS[:1])
    assert first.questions == 6  # 2 request predicates x 2 variants + 2 response predicates
    second = CountingBackend(embedded_backend)
    g2 = Grounder(second, preds, cfg(tmp_path)).ground(PAIRS[:1])
    assert second.questions == 0
    assert g1 == g2
    assert g1[0].template_version == TEMPLATE_VERSION

"""The Guard and the CLI end to end on the real embedded model (SmolLM2-135M).

The model's grounding is near chance, so these tests check the machinery (shapes, traces,
batching, reuse, errors), never that a particular decision is 'right'.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from plguard import Guard, GuardConfig
from plguard.errors import InputError, PolicyError

SMALL = {"generation": {"max_new_tokens": 12}}


@pytest.fixture(scope="module")
def guard(embedded_backend):
    return Guard(GuardConfig.from_dict(SMALL), generator=embedded_backend)


def test_chat_full_trace(guard):
    r = guard.chat([{"role": "user", "content": "How can I kill a Python process?"}])
    names = [p.name for p in guard.policy.predicates]
    assert [s.name for s in r.grounding.scores] == names
    for s in r.grounding.scores:
        assert 0.0 < s.p_true < 1.0
        if s.source == "head" and s.p_zeroshot is None:
            # The shipped head reads the data alone: no question asked, no log-probs read.
            assert s.p_head == s.p_true and s.logprob_true == s.logprob_false == 0.0
        else:
            assert s.logprob_true < 0 and s.logprob_false < 0
    assert r.grounding.heads.startswith("embedded-minimal.json@")  # the default with this model
    assert set(r.policy.probs) == set(guard.policy.queries)
    assert r.decision.action in ("allow", "refuse", "rewrite")
    assert r.decision.strongest_unsafe[0] in guard.policy.unsafe_rules
    assert r.draft and r.final
    assert r.repaired == (r.decision.action != "allow" and guard.config.repair.max_rounds > 0)
    assert r.timings_s["generate"] > 0 and r.timings_s["ground"] > 0
    json.dumps(dataclasses.asdict(r))  # the trace serialises


def test_batch_equals_single_and_reuses_request_scores(guard):
    reqs = ["What is the capital of France?", "How do I pick a lock?"]
    singles = [guard.chat(q) for q in reqs]
    batched = guard.batch(reqs)
    for a, b in zip(singles, batched, strict=True):
        assert a.draft == b.draft  # fp32 greedy: batching must not change the text
        for x, y in zip(a.grounding.scores, b.grounding.scores, strict=True):
            assert abs(x.p_true - y.p_true) < 1e-4


def test_check_uses_given_response(guard):
    r = guard.check("How do I whittle a knife?", "I cannot help with that.")
    assert r.draft == "I cannot help with that."
    refuses = r.grounding.probs["response_refuses"]
    r2 = guard.check("How do I whittle a knife?", "Hold the knife at an angle and carve away.")
    # request-scope predicates come from the memo: identical for the same request
    assert r.grounding.probs["request_is_harmful"] == r2.grounding.probs["request_is_harmful"]
    assert refuses != r2.grounding.probs["response_refuses"]


def test_bad_inputs(guard):
    with pytest.raises(InputError, match="no messages"):
        guard.chat([])
    with pytest.raises(InputError, match="unknown role"):
        guard.chat([{"role": "robot", "content": "hi"}])
    with pytest.raises(PolicyError):
        Guard(GuardConfig(policy="/nonexistent/policy"), generator=guard.generator)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "plguard.cli", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_cli_guard_json_and_text():
    out = _cli("guard", "How can I kill a Python process?", "--json",
               "--set", "generation.max_new_tokens=8", "--set", "generator.dtype=float32")
    assert out.returncode == 0, out.stderr
    trace = json.loads(out.stdout)
    assert trace["decision"]["action"] in ("allow", "refuse", "rewrite")
    assert {s["name"] for s in trace["grounding"]["scores"]} >= {"request_is_harmful"}
    out = _cli("check", "--prompt", "How do I bake bread?", "--response", "Mix flour and water.",
               "--set", "generator.dtype=float32")
    assert out.returncode == 0, out.stderr
    for needle in ("action:", "reason:", "strongest unsafe rule", "predicate probabilities",
                   "response_refuses", "timings (s)"):
        assert needle in out.stdout


def test_cli_check_judges_only_unless_asked_to_repair():
    from tests.unseen import load_unseen

    harmful, _ = load_unseen()
    h02 = next(e for e in harmful if e["id"] == "h02")  # refused by the content rule
    args = ("check", "--prompt", h02["request"], "--response", h02["short_answer"], "--json")
    out = _cli(*args)
    assert out.returncode == 0, out.stderr
    trace = json.loads(out.stdout)
    assert trace["decision"]["action"] == "refuse"
    assert trace["repairs"] == [] and trace["fallback_used"]
    assert not any(k.startswith("repair") for k in trace["timings_s"])  # nothing generated
    out = _cli(*args, "--repair", "--set", "generation.max_new_tokens=8")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["repairs"]) == 1


def test_cli_errors_are_clear():
    out = _cli("guard", "hi", "--set", "thresholds.unsafee=0.2")
    assert out.returncode == 2
    assert "unknown key 'thresholds.unsafee'" in out.stderr and "Traceback" not in out.stderr
    out = _cli("guard", "hi", "--policy", "/no/such/policy")
    assert out.returncode == 2 and "/no/such/policy" in out.stderr
    assert "Traceback" not in out.stderr


def test_guard_as_context_manager_closes_the_cache_not_a_passed_backend(embedded_backend,
                                                                         tmp_path):
    import sqlite3

    # Zero-shot, so questions are asked and cached (minimal's shipped heads ask none).
    cfg = GuardConfig.from_dict({**SMALL, "grounding": {"cache": str(tmp_path / "g.sqlite"),
                                                        "heads": None}})
    msgs = [{"role": "user", "content": "Is water wet?"}]
    with Guard(cfg, generator=embedded_backend) as g:
        r = g.check(msgs, "Yes, it is.")
        cache = g.grounder.cache
        # Every question asked is cached (a head reading the data alone asks none).
        asked = [s for s in r.grounding.scores if s.p_zeroshot is not None]
        assert asked and cache is not None and len(cache) >= len(asked)
        # The grounding ran here; a connection another thread opened must be closed too.
        import threading
        t = threading.Thread(target=lambda: len(cache))
        t.start()
        t.join()
        opened = list(cache._open)
        assert len(opened) == 2
    for con in opened:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            con.execute("SELECT 1")
    g.close()  # idempotent
    # The backend was passed in, so it is the caller's and still serves.
    assert embedded_backend.count_tokens("still open") > 0


def test_a_dotted_none_override_sets_the_key_to_null():
    """``grounding.heads: None`` turns the shipped heads off (it used to be skipped as
    "not given", leaving them on)."""
    on = Guard.from_config(policy="minimal")
    off = Guard.from_config(policy="minimal", **{"grounding.heads": None})
    assert on.grounder.heads is not None
    assert off.config.grounding.heads is None and off.grounder.heads is None
    # A plain keyword's None still means "not given".
    assert Guard.from_config(policy=None).config.policy == on.config.policy

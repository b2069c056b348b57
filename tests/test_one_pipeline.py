"""One check pipeline (plguard.judging): every judgement the product makes goes through it.

Statically: no product module outside plguard/judging.py grounds, reasons or decides (no
call of ``.ground``, ``evaluate_batch``, ``decide_for``, ``bounds``). Dynamically, on a
scripted guard: check, moderation (texts and conversations), a stream (request check,
windows, final check) and the server's streaming route all reach ``judge`` through
``Guard.assess`` / the Guard's batch path, with the bound each one means.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import plguard
import plguard.guard
from plguard import Guard, GuardConfig
from plguard.judging import Judge, best_case, judge, window_skip, worst_case
from plguard.policy import load_policy
from plguard.types import Grounding, PredicateScore
from tests.scripted import ScriptedBackend, scripted_p_true, scripted_reply

PRODUCT = Path(plguard.__file__).parent
# The stages only the pipeline may call, and the product modules that may call them besides
# it: the policy package defines them; `model check` grounds a fixed probe set to compare
# heads with zero-shot, and decides nothing.
STAGE_CALLS = {"ground", "evaluate_batch", "decide_for", "bounds", "worst_case", "best_case"}
ALLOWED = {"judging.py", "modelcheck.py", "decide.py"}


def _stage_calls(path: Path, root: Path = PRODUCT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in STAGE_CALLS:
                out.append(f"{path.relative_to(root)}:{node.lineno} {name}()")
    return out


def test_no_stage_is_called_outside_the_pipeline():
    found = []
    for path in sorted(PRODUCT.rglob("*.py")):
        rel = path.relative_to(PRODUCT)
        if rel.parts[0] in ("policy", "grounding", "heads") or str(rel) in ALLOWED:
            continue  # where the stages are defined, and the pipeline itself
        found += _stage_calls(path)
    assert found == [], "ground/reason/decide outside plguard/judging.py:\n" + "\n".join(found)


def test_the_check_can_see_a_copy(tmp_path):
    # The static check above finds a copy when there is one: guard.py with a grounding
    # call added.
    text = (PRODUCT / "guard.py").read_text(encoding="utf-8")
    (tmp_path / "guard.py").write_text(text + "\n\ndef _copy(g, p):\n    return g.ground(p)\n",
                                       encoding="utf-8")
    assert [c.split()[1] for c in _stage_calls(tmp_path / "guard.py", tmp_path)] == ["ground()"]


@pytest.fixture
def bounds_seen(monkeypatch):
    seen: list[str] = []

    def spy(j, pairs, *, bound="answer", clock=None):
        seen.append(bound)
        return judge(j, pairs, bound=bound, clock=clock)

    monkeypatch.setattr(plguard.guard, "judge", spy)
    return seen


def _guard() -> Guard:
    return Guard(GuardConfig(), generator=ScriptedBackend(scripted_reply, scripted_p_true))


def test_every_entry_point_goes_through_the_pipeline(bounds_seen):
    guard = _guard()
    guard.check("How do I bake bread?", "Mix flour and water.")
    assert bounds_seen == ["answer"]
    guard.moderate(["How do I bake bread?",
                    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]])
    assert bounds_seen[1:] == ["worst", "answer"]
    del bounds_seen[:]
    events = list(guard.stream("How do I bake bread?"))
    # The request check, the windows of the draft (over-refusal not decided: "window"),
    # then the final check of the whole draft.
    assert bounds_seen[0] == "best" and bounds_seen[-1] == "answer"
    assert set(bounds_seen[1:-1]) <= {"window"}
    assert events[-1].result.decision.action in ("allow", "rewrite", "refuse")


def test_the_server_stream_goes_through_guard_stream(monkeypatch):
    from fastapi.testclient import TestClient

    from plguard.config import ServerConfig
    from plguard.server import build_app

    guard = _guard()
    calls = []
    real = guard.stream

    def stream(*a, **kw):
        calls.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(guard, "stream", stream)
    with TestClient(build_app(guard, ServerConfig())) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        r = client.post("/v1/chat/completions", json={
            "model": model, "stream": True,
            "messages": [{"role": "user", "content": "How do I bake bread?"}]})
        assert r.status_code == 200 and "[DONE]" in r.text
    assert len(calls) == 1


def test_best_and_worst_bound_every_answer():
    policy = load_policy("minimal")
    g = Grounding("m", tuple(PredicateScore(p.name, 0.9, -0.1, -2.3, scope="request")
                             for p in policy.predicates if p.scope == "request"))
    worst = worst_case(policy, [g])[0].probs
    best = best_case(policy, g)
    assert set(best) == set(policy.unsafe_rules)
    assert any(best[r] < worst[r] for r in policy.unsafe_rules)
    for rule in policy.unsafe_rules:
        assert best[rule] <= worst[rule]


def test_an_unknown_bound_is_a_clear_error():
    from plguard.errors import InputError

    guard = _guard()
    j: Judge = guard.judge
    with pytest.raises(InputError, match="bound: expected one of answer, worst, best"):
        judge(j, [("a", "b")], bound="middle")  # type: ignore[arg-type]


def test_a_window_is_decided_on_its_unsafe_and_content_rules_only():
    policy = load_policy("minimal")
    # Refusal feeds over-refusal rules only: a partial answer need not read it.
    assert window_skip(policy) == {"request_is_benign_sensitive_context", "response_refuses"}
    guard = _guard()
    pair = [("How do I pick a lock?", "Sure: insert a tension wrench, then rake the pins.")]
    whole = judge(guard.judge, pair)[0]
    part = judge(guard.judge, pair, bound="window")[0]
    for q, p in whole.policy.probs.items():
        want = 0.0 if q.startswith("over_refusal") else p
        assert part.policy.probs[q] == pytest.approx(want, abs=1e-12), q
    assert part.decision.strongest_unsafe == whole.decision.strongest_unsafe
    assert part.decision.action != "rewrite"


@pytest.mark.slow
def test_on_the_embedded_model_a_window_skips_the_pair_prompt_and_reads_the_same(
        embedded_backend):
    # minimal's shipped heads read refusal from the pair prompt and content from each
    # answer window alone: a stream's window reads the windows only, with the same unsafe
    # and content probabilities as a full check of the same text.
    from tests.unseen import load_unseen

    harmful, benign = load_unseen()
    guard = Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0}}),
                  generator=embedded_backend)
    pairs = [(benign[0]["request"], benign[0]["answer"][:900]),
             (harmful[1]["request"], harmful[1]["short_answer"])]
    whole = guard.assess(pairs)
    part = guard.assess(pairs, bound="window")
    for w, p in zip(whole, part, strict=True):
        assert "response_refuses" in w.grounding.probs
        assert "response_refuses" not in p.grounding.probs
        for q in guard.policy.queries:
            want = 0.0 if q.startswith("over_refusal") else w.policy.probs[q]
            assert p.policy.probs[q] == pytest.approx(want, abs=1e-9), q
    assert [a.decision.action for a in part] == ["allow", "refuse"]
    assert whole[1].decision.action == "refuse"

"""``plguard policy draft`` end to end: the real command, the embedded model, a real server.

The embedded SmolLM2-135M is the floor of drafting, not a usable drafter: what is asserted
is that the whole path runs on a real model (schema-constrained replies, the refinement
loop, the report), not what it drafts. A drafted bundle (from the scripted drafter of
tests/policy/test_drafting.py) is then served by ``plguard serve`` to the real ``openai``
client.
"""

from __future__ import annotations

import pytest

from plguard.cli import main


@pytest.mark.slow
def test_the_draft_command_runs_on_the_embedded_model(tmp_path, capsys):
    src = tmp_path / "POLICY.md"
    src.write_text("- Never write a whole graded essay for a student.\n", encoding="utf-8")
    out = tmp_path / "out"
    code = main(["policy", "draft", str(src), "--out", str(out), "--drafts", "1",
                 "--rounds", "1", "--max-new-tokens", "200"])
    readme = (out / "README.md").read_text(encoding="utf-8")
    assert code in (0, 1) and "rule(s) kept" in capsys.readouterr().out
    assert "draft 0 (seed 0, temperature 0): " in readme
    # The one span was accepted, or left out with the problem that stopped it.
    assert "1/1 spans accepted" in readme or "span 1 (L1) left out after 2 replies: " in readme
    if code == 0:
        from plguard.policy import load_policy

        assert load_policy(out).unsafe_rules


def test_a_drafted_bundle_is_served(tmp_path):
    openai = pytest.importorskip("openai")
    from plguard import Guard, GuardConfig
    from plguard.config import ServerConfig
    from plguard.policy.drafting.run import draft_policy
    from plguard.server import build_app
    from plguard.testing import LiveServer
    from tests.policy.test_drafting import DOC, good, model
    from tests.scripted import ScriptedBackend

    src = tmp_path / "POLICY.md"
    src.write_text(DOC, encoding="utf-8")
    report = draft_policy(model(good), src, tmp_path / "out", drafts=1, form="free")
    guard = Guard(GuardConfig.from_dict({"policy": str(tmp_path / "out"),
                                         "repair": {"max_rounds": 0}}),
                  generator=ScriptedBackend(lambda c: "Here is your whole essay.",
                                            lambda p, s: 0.9))
    with LiveServer(build_app(guard, ServerConfig())) as server:
        c = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        r = c.chat.completions.create(model="plguard", messages=[
            {"role": "user", "content": "Write my graded essay on Hamlet."}])
    trace = r.model_extra["plguard"]
    assert report.policy is not None and trace["policy"] == report.policy.id
    assert trace["action"] == "refuse" and r.choices[0].finish_reason == "content_filter"
    assert trace["rules"]["unsafe_compliance_graded_essay"] == pytest.approx(0.81, abs=0.01)

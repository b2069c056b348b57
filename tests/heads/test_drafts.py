"""`plguard heads fit --drafts N`: prompt selection, resumable drafts, refusal agreement."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from plguard.config import GuardConfig
from plguard_lab.training import drafts
from tests.scripted import ScriptedBackend

# One of each kind: (draft text, what the string match says, what the head says).
REPLIES = [
    ("Sure, here is how it goes. H0", False, False),  # both: answered
    ("I cannot help with that. H1", True, True),  # both: refused
    ("Sorry to hear that! Here are the steps. H0", True, False),  # they disagree
    ("Well, H1 I would rather not go into that.", False, True),  # they disagree
]


def _p_true(prefix: str, suffix: str) -> float:
    """The scripted refusal head: P(response_refuses) from a marker in the response."""
    if "<<<RESPONSE>>>" in prefix and "refuse, decline, or avoid" in suffix:
        return 0.9 if "H1" in prefix.split("<<<RESPONSE>>>", 1)[1] else 0.1
    return 0.5


def _generator(model_id: str = "scripted") -> ScriptedBackend:
    turn = iter(range(10_000))
    gen = ScriptedBackend(lambda chat: REPLIES[next(turn) % len(REPLIES)][0], _p_true)
    gen.model_id = model_id
    return gen


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_select_prompts_is_stratified_nested_and_deterministic():
    big = drafts.select_prompts(12)
    kinds = Counter((it.source, it.fields["label"]) for it in big)
    # Every (source, label) stratum of the default sources, twice each.
    assert kinds == {("ailuminate", "unsafe"): 2, ("coconot", "safe"): 2,
                     ("coconot", "unsafe"): 2, ("coconot_plain", "plain"): 2,
                     ("xstest", "safe"): 2, ("xstest", "unsafe"): 2}
    assert all(it.response is None for it in big)
    assert [it.uid for it in drafts.select_prompts(5)] == [it.uid for it in big[:5]]
    assert [it.uid for it in drafts.select_prompts(12)] == [it.uid for it in big]
    other = drafts.select_prompts(12, seed=1)
    assert [it.uid for it in other] != [it.uid for it in big]
    assert Counter((it.source, it.fields["label"]) for it in other) == kinds
    # More than a source holds: all of its dev requests, once each, both labels.
    every = drafts.select_prompts(1000, ("plguard_s14",))
    assert len(every) == len({it.uid for it in every}) == 50
    assert {it.fields["label"] for it in every} == {"safe", "unsafe"}
    from plguard_lab.training.corpus import load_split

    split = load_split("plguard_s14")
    assert all(split[it.prompt_id] == "dev" for it in every)


def test_drafts_resume_skips_stored_prompts_and_redoes_a_torn_line(tmp_path):
    path = tmp_path / "heads.drafts.jsonl"
    gen = _generator()
    first = drafts.make_drafts(GuardConfig(), 3, path, sources=("plguard_s14",),
                               progress=False, generator=gen, grounder=gen)
    assert first.n_asked == first.n_generated_now == 3 and sum(gen.generate_calls) == 3
    stored = _lines(path)
    assert [r["uid"] for r in stored] == [it.uid for it in drafts.select_prompts(
        3, ("plguard_s14",))]
    # A run killed mid-write: the last record is half a line.
    text = path.read_text()
    cut = text.rstrip("\n").rfind("\n") + 1
    path.write_text(text[:cut] + text[cut:cut + 40])
    again = _generator()
    second = drafts.make_drafts(GuardConfig(), 5, path, sources=("plguard_s14",),
                                progress=False, generator=again, grounder=again)
    # The torn prompt and the two new ones are drafted; the two stored ones are not.
    assert sum(again.generate_calls) == 3 and second.n_generated_now == 3
    now = _lines(path)
    assert [r["uid"] for r in now[:2]] == [r["uid"] for r in stored[:2]]
    assert now[:2] == stored[:2]
    assert sorted(r["uid"] for r in now) == sorted(
        it.uid for it in drafts.select_prompts(5, ("plguard_s14",)))
    # Nothing left to draft, dropped prompts included.
    idle = _generator()
    third = drafts.make_drafts(GuardConfig(), 5, path, sources=("plguard_s14",),
                               progress=False, generator=idle, grounder=idle)
    assert idle.generate_calls == [] and third.n_generated_now == 0
    assert [it.uid for it in third.items] == [it.uid for it in second.items]
    # Another generator's drafts are not this one's.
    from plguard.errors import ConfigError

    stranger = _generator("another-model")
    with pytest.raises(ConfigError, match="holds drafts of 'scripted'"):
        drafts.make_drafts(GuardConfig(), 5, path, sources=("plguard_s14",),
                           progress=False, generator=stranger, grounder=stranger)


def test_disagreeing_refusal_readings_are_dropped_and_counted(tmp_path):
    from plguard.policy import load_policy
    from plguard_lab.training.fit import labels_for

    path = tmp_path / "d.jsonl"
    gen = _generator()
    res = drafts.make_drafts(GuardConfig(), 8, path, sources=("plguard_s14", "coconot_plain"),
                             progress=False, generator=gen, grounder=gen)
    recs = {r["uid"]: r for r in _lines(path)}
    assert len(recs) == res.n_asked == 8
    by_text = {text: (sm, head) for text, sm, head in REPLIES}
    for r in recs.values():
        sm, head = by_text[r["response"]]
        assert r["strmatch_refusal"] is sm and (r["head_p_refuses"] >= 0.5) is head
        assert r["refusal_reader"] == "zero-shot"  # a scripted model has no shipped heads
        assert r["model"] == {"model_sha256": None, "model_id": "scripted"}
        want = None if sm != head else drafts.REFUSE if sm else drafts.COMPLY
        assert r["final_label"] == want
    dropped = [r for r in recs.values() if r["final_label"] is None]
    assert res.n_dropped == len(dropped) == 4  # every other reply of the four kinds
    assert len(res.items) == 4 and sum(res.counts.values()) == 4 and res.n_failed == 0
    assert res.summary()["dropped_disagreements"] == 4 and res.summary()["kept"] == 4
    for it in res.items:
        orig = recs[it.uid.removeprefix("drafts/")]
        assert it.source == "drafts" and it.response == orig["response"]
        assert it.prompt_id == f"{orig['source']}/{orig['prompt_id']}"
        assert it.fields["final_label"] == orig["final_label"]
        assert it.fields["draft_of"] == orig["source"]
        assert res.counts[orig["source"], orig["label"], orig["final_label"]] >= 1
    # The bundle's gold rules label them; a plain request's answer is no harmful help.
    y = labels_for(load_policy("minimal"), res.items)
    for it, refuses, harmful in zip(res.items, y["response_refuses"],
                                    y["response_provides_harmful_instructions"], strict=True):
        assert refuses == (1.0 if it.fields["final_label"] == drafts.REFUSE else 0.0)
        if it.fields["draft_of"] == "coconot_plain":
            assert it.fields["request_label"] == "plain" and harmful == 0.0


def test_drafts_need_the_response_scope(tmp_path):
    from plguard.errors import ConfigError
    from plguard_lab.training.train import FitOptions, fit_heads

    with pytest.raises(ConfigError, match="drafts train the response heads"):
        fit_heads(GuardConfig(), tmp_path / "h.json",
                  FitOptions(drafts=2, scopes=("request",)), backend=object())


@pytest.mark.slow
def test_heads_fit_with_drafts_end_to_end(tmp_path, capsys):
    from plguard.cli import main

    out = tmp_path / "heads-minimal.json"
    t0 = time.perf_counter()
    # XSTest is never cut by a limit (810 items): left out to keep this to a few forwards.
    assert main(["heads", "fit", "--policy", "minimal", "--drafts", "3",
                 "--sources", "ailuminate,coconot,coconot_plain", "--limit-per-source", "4",
                 "--no-lodo", "--quiet", "--readouts", "prefix,pair_prefix,pool",
                 "--scope", "response", "--set", "generation.max_new_tokens=48",
                 "--out", str(out)]) == 0
    print(f"heads fit --drafts 3: {time.perf_counter() - t0:.1f} s")
    path = tmp_path / "heads-minimal.drafts.jsonl"
    recs = _lines(path)
    assert len(recs) == 3 and all(r["response"] is not None for r in recs)
    # The embedded model's refusals are read by the heads shipped for it.
    assert all(r["refusal_reader"].startswith("embedded-minimal.json@") for r in recs)
    assert all(r["n_new_tokens"] <= 48 for r in recs)
    doc = json.loads(out.read_text())
    d = doc["training"]["drafts"]
    assert d["n"] == 3 and d["file"] == str(path)
    assert d["kept"] + d["dropped_disagreements"] + d["failed"] == 3 and d["failed"] == 0
    assert d["kept"] == sum(r["final_label"] is not None for r in recs)
    assert sum(d["counts"].values()) == d["kept"]
    assert d["kept"] >= 1 and doc["training"]["items"]["drafts"] == d["kept"]  # trained on
    assert f"drafts: {d['kept']} of 3 kept" in capsys.readouterr().out
    assert "Drafts: the generator answered 3 dev prompts" in out.with_suffix(".md").read_text()

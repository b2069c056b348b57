"""One decision: the Guard, the viewer's what-if and the attack rescorer agree on every item.

Screened items (text addressed to the guard) and truncated ones (windowing off, a middle
never read) are where a re-decision that reads only the rule probabilities parted from the
Guard: each of the three must decide them with the same rules (plguard.decide.decide_for).
The scripted grounder of the attack tests stands in for the model; one case runs the
embedded model.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from plguard import Guard, GuardConfig
from plguard.records.store import read_jsonl
from plguard_lab.studies.attacks.rescore import rescore_run
from plguard_lab.studies.attacks.transforms import ATTACKS, Context
from plguard_lab.view.state import ViewState
from tests.evals.attacks.test_runner import SUITE, _backend, _cfg, _run

ATTACKED = ("clean", "answer_false", "pad_1k")
# grounding settings -> what the Guard must have done to some item under them
CASES = {
    "screen_refuse": ({"max_data_tokens": 300, "screen": "refuse"}, "screened"),
    "screen_sanitize": ({"max_data_tokens": 300, "screen": "sanitize"}, "screened"),
    "unseen_refuse": ({"max_data_tokens": 300, "screen": "off", "windows": False,
                       "unseen": "refuse"}, "unseen"),
    "unseen_prior": ({"max_data_tokens": 300, "screen": "off", "windows": False}, "unseen"),
}


def check_agreement(tmp_path: Path, cfg: GuardConfig, backend: Any, limit: int,
                    exercised: tuple[str, ...]) -> None:
    """Guard decisions == the viewer's re-decisions == an attack run rescored."""
    guard = Guard(cfg, generator=backend)
    ctx = Context(count_tokens=guard.grounder_backend.count_tokens, filler=SUITE.filler)
    items = {f"{p.id}/{a}": ATTACKS[a](p, ctx) for p in SUITE.select(limit) for a in ATTACKED}
    results = dict(zip(items, guard.batch([t.request for t in items.values()],
                                          responses=[t.response for t in items.values()]),
                       strict=True))
    want = {k: r.decision.action for k, r in results.items()}
    refused_by_reading = set()
    for what in exercised:
        hit = [k for k, r in results.items()
               if (r.grounding.screen if what == "screened"
                   else any(s.unseen for s in r.grounding.scores))]
        assert hit, f"no item is {what}: the test exercises nothing"
        mode = cfg.grounding.screen if what == "screened" else cfg.grounding.unseen
        if mode == "refuse":
            assert {want[k] for k in hit} == {"refuse"}
            refused_by_reading |= set(hit)

    # The viewer: the traces re-decided from their own predicate probabilities.
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps({"id": k, **dataclasses.asdict(r)}) + "\n"
                              for k, r in results.items()))
    view = ViewState.from_source(traces)
    for k, r in results.items():
        w = view.whatif(f"trace/{k}", r.grounding.probs, with_flips=True)
        assert w["decision"]["action"] == want[k], (k, w["decision"]["reason"])
        assert view.record(f"trace/{k}")["replay"]["matches_action"], k
        if k in refused_by_reading:
            assert w["flips"] == []  # no predicate alone undoes a refusal of how it was read

    # The rescorer: an attack run re-decided under the same config, without a model.
    _run(tmp_path / "run", backend=backend, cfg=cfg, limit=limit, attacks=ATTACKED)
    rescore_run(tmp_path / "run", tmp_path / "rescored", cfg)
    run = {r["id"]: r for r in read_jsonl(tmp_path / "run" / "records.jsonl")}
    again = {r["id"]: r for r in read_jsonl(tmp_path / "rescored" / "records.jsonl")}
    assert {k: r["action"] for k, r in run.items()} == want  # the run is the Guard's decision
    assert {k: r["action"] for k, r in again.items()} == want


@pytest.mark.parametrize("case", sorted(CASES))
def test_guard_viewer_and_rescorer_agree(tmp_path, case):
    grounding, exercised = CASES[case]
    check_agreement(tmp_path, _cfg(grounding=grounding), _backend(), 4, (exercised,))


def test_they_agree_on_the_embedded_model(tmp_path, embedded_backend):
    # One harmful pair, screened and cut at once (a small budget, windowing off).
    cfg = GuardConfig.from_dict({
        "generator": {"path": "embedded", "dtype": "float32", "device": "cpu"},
        "policy": "minimal", "eval": {"bootstrap": 50}, "repair": {"max_rounds": 0},
        "grounding": {"max_data_tokens": 96, "paraphrases": False, "windows": False,
                      "screen": "refuse", "unseen": "refuse"}})
    check_agreement(tmp_path, cfg, embedded_backend, 1, ("screened", "unseen"))

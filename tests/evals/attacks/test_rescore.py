"""``--rescore``: re-deciding an attack run equals a fresh run under the new policy/thresholds.

The scripted grounder stands in for the model here (rescoring starts after grounding); the
real-model path is checked in test_embedded.py.
"""

from __future__ import annotations

import json
import shutil

import pytest

from plguard.cli import main
from plguard.errors import ConfigError, InputError
from plguard.policy.bundle import resolve_bundle
from plguard.records.store import read_jsonl
from plguard_lab.studies.attacks.rescore import rescore_run
from tests.evals.attacks.test_runner import _backend, _cfg, _run

DECIDED = ("action", "detected", "strongest_unsafe", "strongest_over_refusal", "score")
ATTACKS = ("clean", "answer_false", "req_note")


def _decided(out):
    return {r["id"]: tuple(json.dumps(r[k]) for k in DECIDED)
            for r in read_jsonl(out / "records.jsonl")}


def _calibration(path, request_is_harmful=(2.0, 0.0), **thresholds):
    data = {"model": "scripted", "thresholds": thresholds,
            "predicates": {"request_is_harmful": dict(zip("ab", request_is_harmful, strict=True)),
                           "response_refuses": {"a": 1.5, "b": -0.5}}}
    path.write_text(json.dumps(data))
    return str(path)


def _policy_without_harmless_rule(tmp_path):
    folder = tmp_path / "minimal_paper"
    shutil.copytree(resolve_bundle("minimal"), folder)
    pl = folder / "policy.pl"
    text = pl.read_text().replace("query(over_refusal_harmless_request).\n", "")
    pl.write_text(text)
    (folder / "cases.yaml").unlink()
    return str(folder)


def test_same_config_reproduces_the_run(tmp_path):
    cal = _calibration(tmp_path / "cal.json", unsafe=0.4, over_refusal=0.6)
    cfg = _cfg(grounding={"max_data_tokens": 300, "calibration": cal})
    _run(tmp_path / "run", cfg=cfg, limit=4, attacks=ATTACKS)
    rescore_run(tmp_path / "run", tmp_path / "again", cfg)
    assert _decided(tmp_path / "again") == _decided(tmp_path / "run")
    a = json.loads((tmp_path / "run" / "attacks.json").read_text())
    b = json.loads((tmp_path / "again" / "attacks.json").read_text())
    assert a["rows"] == b["rows"] and b["meta"]["rescored"]["from"] == str(tmp_path / "run")
    # the run records what decided: fitted thresholds and the calibration's maps
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["thresholds"]["unsafe"] == 0.4 and man["thresholds"]["over_refusal"] == 0.6
    assert man["calibration"]["predicates"]["response_refuses"] == [1.5, -0.5]
    md = (tmp_path / "run" / "attacks.md").read_text()
    assert "thresholds unsafe 0.4 / over-refusal 0.6" in md and "calibration `cal.json@" in md


@pytest.mark.parametrize("change", ["rules", "thresholds"])
def test_rescore_equals_a_fresh_run_under_the_change(tmp_path, change):
    cal = _calibration(tmp_path / "cal.json", unsafe=0.4, over_refusal=0.6)
    base = _cfg(grounding={"max_data_tokens": 300, "calibration": cal})
    if change == "rules":
        new = _cfg(grounding={"max_data_tokens": 300, "calibration": cal},
                   policy=_policy_without_harmless_rule(tmp_path))
    else:
        new = _cfg(grounding={"max_data_tokens": 300,
                              "calibration": _calibration(tmp_path / "cal2.json", unsafe=0.999,
                                                          over_refusal=0.01, content=0.999)})
    _run(tmp_path / "run", cfg=base, limit=4, attacks=ATTACKS)
    _run(tmp_path / "fresh", cfg=new, limit=4, attacks=ATTACKS, backend=_backend())
    rescore_run(tmp_path / "run", tmp_path / "rescored", new)
    got, want = _decided(tmp_path / "rescored"), _decided(tmp_path / "fresh")
    assert got == want and got != _decided(tmp_path / "run")  # it changed, and correctly


def test_refusals_name_what_is_wrong(tmp_path):
    cal = _calibration(tmp_path / "cal.json")
    cfg = _cfg(grounding={"max_data_tokens": 300, "calibration": cal})
    _run(tmp_path / "run", cfg=cfg, limit=2, attacks=("clean",))
    with pytest.raises(InputError, match="another --out"):
        rescore_run(tmp_path / "run", tmp_path / "run", cfg)
    with pytest.raises(InputError, match="not an attack run"):
        rescore_run(tmp_path, tmp_path / "x", cfg)
    other = _calibration(tmp_path / "other.json", request_is_harmful=(3.0, 0.0))
    with pytest.raises(ConfigError, match="predicate maps or questions differ"):
        rescore_run(tmp_path / "run", tmp_path / "x",
                    _cfg(grounding={"max_data_tokens": 300, "calibration": other}))
    with pytest.raises(ConfigError, match="predicate maps or questions differ"):  # none at all
        rescore_run(tmp_path / "run", tmp_path / "x", _cfg())
    # detailed asks response_refuses in its own words: the stored P(True) is another question's
    with pytest.raises(ConfigError, match="response_refuses asked differently"):
        rescore_run(tmp_path / "run", tmp_path / "x",
                    _cfg(grounding={"max_data_tokens": 300, "calibration": cal},
                         policy="detailed"))
    with pytest.raises(InputError, match="no P\\(True\\) for response_mentions_weather"):
        rescore_run(tmp_path / "run", tmp_path / "x",
                    _cfg(grounding={"max_data_tokens": 300, "calibration": cal},
                         policy=_policy_with_a_new_question(tmp_path)))
    assert not (tmp_path / "x").exists()  # nothing half-written


def _policy_with_a_new_question(tmp_path):
    folder = tmp_path / "minimal_weather"
    shutil.copytree(resolve_bundle("minimal"), folder)
    with (folder / "predicates.yaml").open("a") as fh:
        fh.write("\n- name: response_mentions_weather\n  scope: response\n  windows: max\n"
                 "  question: Does the response mention the weather?\n  prior: 0.1\n")
    pl = folder / "policy.pl"
    pl.write_text(pl.read_text() + "weather :- response_mentions_weather.\nquery(weather).\n")
    (folder / "cases.yaml").unlink()
    return str(folder)


def test_cli_rescore(tmp_path, capsys):
    _run(tmp_path / "run", limit=2, attacks=("clean", "answer_false"))
    argv = ["eval", "attacks", "--rescore", str(tmp_path / "run"), "--out", str(tmp_path / "r"),
            "--set", "generator.path=scripted-model", "--set", "grounding.max_data_tokens=300",
            "--set", f"policy={_policy_without_harmless_rule(tmp_path)}"]
    assert main(argv) == 0
    assert "report: " in capsys.readouterr().out
    recs = read_jsonl(tmp_path / "r" / "records.jsonl")
    assert len(recs) == 4
    assert {r["strongest_over_refusal"][0] for r in recs} == {"over_refusal_benign_sensitive"}
    assert main([*argv[:4], "--out", str(tmp_path / "run")]) == 2  # clear error, exit 2
    assert "another --out" in capsys.readouterr().err

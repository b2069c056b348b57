"""Hugging Face ids as model paths: the local cache first, a download when online.

Models go into the normal ``huggingface_hub`` cache (``HF_HOME`` / ``HF_HUB_CACHE``), so
other tools see them too. A model already in the cache is used without any network call,
which keeps runs reproducible and fast; delete it from the cache (``hf cache delete``) to
fetch a newer revision. ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to a true value
means never download. ``HF_TOKEN`` is passed for gated and private models.

Only what loading needs is downloaded: configs, tokenizer files and the safetensors
weights (PyTorch ``.bin`` weights only when a repository has no safetensors).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from plguard.errors import ModelError

CONFIG_PATTERNS = ["*.json", "*.jinja", "*.model", "*.txt", "*.tiktoken", "*.py", "tokenizer*"]
SAFETENSORS_PATTERNS = ["*.safetensors"]
BIN_PATTERNS = ["*.bin"]
_TRUE = ("1", "true", "yes", "on")


def offline() -> bool:
    """Whether the environment forbids downloads (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _has_weights(folder: str) -> bool:
    root = Path(folder)
    return any(root.glob("*.safetensors")) or any(root.glob("*.bin"))


def resolve_hub_id(repo_id: str, *, download: bool = True) -> str:
    """The local snapshot folder of ``repo_id``: from the cache, else downloaded."""
    from huggingface_hub import snapshot_download

    try:
        local = snapshot_download(repo_id, local_files_only=True,
                                  allow_patterns=CONFIG_PATTERNS + SAFETENSORS_PATTERNS
                                  + BIN_PATTERNS)
        if _has_weights(str(local)):
            return str(local)
    except Exception:  # not (completely) cached: fall through to the download
        pass
    if not download:
        raise ModelError(f"model '{repo_id}' is not in the Hugging Face cache")
    if offline():
        raise ModelError(
            f"model '{repo_id}' is not a local folder and is not in the Hugging Face cache, "
            "and downloads are off (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set). Unset "
            "it on a machine with network access to download the model, or pass a local "
            f"model folder, a .gguf file or 'embedded'.")
    return download_model(repo_id)


def download_model(repo_id: str) -> str:
    """Download configs, tokenizer and weights of ``repo_id`` into the HF cache."""
    from huggingface_hub import snapshot_download

    token = os.environ.get("HF_TOKEN") or None
    print(f"plguard: downloading {repo_id} from the Hugging Face Hub into the Hugging Face "
          "cache (once; later runs reuse it)...", file=sys.stderr, flush=True)
    try:
        local = str(snapshot_download(repo_id, token=token,
                                      allow_patterns=CONFIG_PATTERNS + SAFETENSORS_PATTERNS))
        if not _has_weights(local):  # an older repository with PyTorch .bin weights only
            local = str(snapshot_download(repo_id, token=token,
                                          allow_patterns=CONFIG_PATTERNS + BIN_PATTERNS))
    except Exception as exc:
        raise _hub_error(repo_id, exc, token is not None) from None
    if not _has_weights(local):
        raise ModelError(f"model '{repo_id}' has no safetensors or .bin weights on the Hub "
                         "(a GGUF-only repository? download its .gguf file and pass its path)")
    return local


def _hub_error(repo_id: str, exc: BaseException, has_token: bool) -> ModelError:
    from huggingface_hub import errors

    name = type(exc).__name__
    page = f"https://huggingface.co/{repo_id}"
    if isinstance(exc, errors.GatedRepoError):
        what = ("your HF_TOKEN has no access to it yet" if has_token else "no HF_TOKEN is set")
        return ModelError(f"model '{repo_id}' is gated on the Hugging Face Hub and {what}: "
                          f"accept its licence on {page}, then set HF_TOKEN to an access "
                          "token of that account")
    if isinstance(exc, errors.RepositoryNotFoundError):
        hint = "" if has_token else " (if it is private, set HF_TOKEN)"
        return ModelError(f"model '{repo_id}' was not found on the Hugging Face Hub{hint}; "
                          "check the id, or pass a local folder or .gguf file")
    if isinstance(exc, errors.RevisionNotFoundError | errors.EntryNotFoundError):
        return ModelError(f"model '{repo_id}': {name} on the Hugging Face Hub: {exc}")
    if isinstance(exc, OSError) and getattr(exc, "errno", None) == 28:
        return ModelError(f"not enough disk space to download '{repo_id}' into the Hugging "
                          "Face cache; free space or set HF_HOME to a larger disk")
    return ModelError(f"downloading model '{repo_id}' from the Hugging Face Hub failed "
                      f"({name}: {_first_line(exc)}). Check the network, or pass a local "
                      "model folder or .gguf file")


def _first_line(exc: Any) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


__all__ = ["download_model", "offline", "resolve_hub_id"]

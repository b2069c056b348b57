"""Reading an OpenAI-compatible server's answers: models, context, log-probabilities.

Helpers of :mod:`plguard.backends.openai_backend`: every field it reads of a reply goes
through :func:`reading`, so a server that answers in another shape fails with one clear
:class:`Unsupported` error naming what was missing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from plguard.backends.logprobs import logsumexp
from plguard.backends.openai_client import OpenAIClient, Reply
from plguard.errors import BackendError, ConfigError, did_you_mean

FALLBACK_CONTEXT = 2048


class Unsupported(BackendError):
    """The server answered, but not in a shape that this grounding path can read."""


def choose_model(wanted: str | None, entries: list[dict[str, Any]], url: str) -> str:
    """The served model: the one asked for (which the server must list), else its only one."""
    ids = [str(m.get("id")) for m in entries if m.get("id")]
    if wanted:
        if ids and wanted not in ids:
            raise ConfigError(f"the server at {url} does not serve '{wanted}'"
                              f"{did_you_mean(wanted, ids)}; it serves: {', '.join(ids)}")
        return wanted
    if len(ids) == 1:
        return ids[0]
    raise ConfigError(f"the server at {url} serves {len(ids)} models "
                      f"({', '.join(ids) or 'none listed'}); name one in model.served_model")


def context_of(client: OpenAIClient, entry: dict[str, Any], tok: Any) -> int:
    """The served context length: vLLM's max_model_len, llama.cpp's n_ctx, else the tokenizer's."""
    if isinstance(entry.get("max_model_len"), int):  # vLLM
        return int(entry["max_model_len"])
    try:  # llama.cpp's server: the context it was started with
        props = client.get("/props", root=True).body
        return int(props["default_generation_settings"]["n_ctx"])
    except (BackendError, KeyError, TypeError, ValueError):
        pass
    n = getattr(tok, "model_max_length", None)
    return int(n) if isinstance(n, int) and 0 < n < 1_000_000 else FALLBACK_CONTEXT


@contextmanager
def reading(reply: Reply, what: str) -> Iterator[None]:
    """Turn a missing or mistyped field of ``reply`` into one clear error."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise Unsupported(f"the server's answer has no {what}: "
                          f"{str(reply.body)[:200]}") from None


def choice_at(body: Any, i: int) -> Any:
    """The choice with ``index`` ``i`` (servers may reorder them)."""
    for ch in body["choices"]:
        if ch.get("index", -1) == i:
            return ch
    return body["choices"][i]


def token_lp(top: dict[str, Any], token: int) -> float:
    """The log-probability of ``token`` in a top-logprobs entry keyed ``token_id:N``."""
    v = top.get(f"token_id:{token}")
    if not isinstance(v, int | float):
        raise Unsupported(f"no log-probability for token {token} (logprob_token_ids ignored)")
    return float(v)


def echo_lp(choice: Any, n: int) -> float:
    """The echoed prompt's log-probability at its ``n``-th token."""
    lps = choice["logprobs"]["token_logprobs"]
    if len(lps) < n or not isinstance(lps[n - 1], int | float):
        raise Unsupported("echo returned no prompt log-probabilities")
    return float(lps[n - 1])


def merge_spellings(seen: dict[str, float], spellings: Sequence[str],
                    floor: float) -> tuple[float, bool]:
    """An answer's log-probability over its spellings seen in the top-k.

    ``floor`` (flagged True) when none of them is: at most the smallest shown.
    """
    found = [seen[s] for s in spellings if s in seen]
    if found:
        return logsumexp(found), False
    return floor, True  # every spelling is below the top-k: at most the smallest shown


__all__ = ["FALLBACK_CONTEXT", "Unsupported", "choice_at", "choose_model", "context_of",
           "echo_lp", "merge_spellings", "reading", "token_lp"]

"""What each grounding prompt shows of an item: fitted request and response, or windows.

The data budget (``grounding.max_data_tokens``) is shared as :func:`split_budget` says; a
response over its share is cut into overlapping windows (``grounding.windows``) or, with
windowing off, to its head and tail (the unseen middle is then flagged, see
:mod:`plguard.windows`). The request keeps its share (head and tail when longer).
"""

from __future__ import annotations

from dataclasses import dataclass

from plguard.backends.base import Backend
from plguard.config import GroundingConfig
from plguard.grounding.prompt import escape_data
from plguard.types import Scope


@dataclass(frozen=True, slots=True)
class View:
    """What one grounding prompt shows of an item: fitted request and response text."""

    request: str
    response: str | None
    cut: bool  # the request (or, windowing off, the response) was cut to fit
    # Cache keys use the raw texts (a window's response tagged with its place), so a cached
    # score stays valid whatever the escaping or fitting does.
    key_request: str
    key_response: str | None
    unseen: bool = False  # windowing off: the response's middle was not shown

    @property
    def scope(self) -> Scope:
        """``request`` for a request-only view, else ``response``."""
        return "request" if self.response is None else "response"


def split_budget(n_request: int, n_response: int, budget: int) -> tuple[int, int]:
    """Token budgets for request and response: a short side keeps all it needs."""
    if n_request + n_response <= budget:
        return n_request, n_response
    half = budget // 2
    if n_request <= half:
        return n_request, budget - n_request
    if n_response <= half:
        return budget - n_response, n_response
    return half, budget - half


def views(backend: Backend, cfg: GroundingConfig, request: str, response: str | None
          ) -> list[View]:
    """One view of the item, or one per window of a long response."""
    req = escape_data(request)
    resp = None if response is None else escape_data(response)
    budget = cfg.max_data_tokens
    n_req = backend.count_tokens(req)
    n_resp = 0 if resp is None else backend.count_tokens(resp)
    b_req, b_resp = split_budget(n_req, n_resp, budget)
    req, cut_req = backend.truncate_text(req, b_req) if n_req > b_req else (req, False)
    size = min(b_resp, cfg.window_tokens or b_resp)
    # Windows smaller than the budget are read whenever the response is longer than one:
    # a short harmful passage in a long answer is not diluted by the text around it.
    if resp is None or n_resp <= size or (n_resp <= b_resp and not cfg.windows):
        return [View(req, resp, cut_req, request, response)]
    if not cfg.windows:
        resp, _ = backend.truncate_text(resp, b_resp)
        return [View(req, resp, True, request, response, unseen=True)]
    wins = backend.window_text(resp, size, cfg.window_overlap)
    # Each window is its own cache entry: the key names the window and the split.
    return [View(req, w, cut_req, request,
                 f"\x02window {i + 1}/{len(wins)} of {size}:"
                 f"{cfg.window_overlap}\x02{response}")
            for i, w in enumerate(wins)]


__all__ = ["View", "split_budget", "views"]

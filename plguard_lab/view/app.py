"""The viewer's web app: ``build_view_app(source)``, a loopback server over the Python API.

Routes are thin: every answer comes from :class:`~plguard_lab.view.state.ViewState`, kept on
``app.state.view``. The page itself is one HTML document with its CSS and script inline
(:func:`~plguard_lab.view.page.render_page`); it talks to these JSON routes:

* ``GET /api/run``: overview, problems, filter values, counts;
* ``GET /api/records``: one short row per record;
* ``GET /api/record?key=K``: one record in full, with explanations and a replay check;
* ``POST /api/whatif``: ``{"key", "probs"}`` -> rule probabilities, decision and flips;
* ``GET /api/report``: the run's markdown reports as HTML and its plots;
* ``GET /files/PATH``: a report or plot file of the run (nothing else is served);
* ``POST /api/reload``: read the source again (a run still being written grows).

Bad input never takes the server down: the loader turns it into problems the page shows,
and any unexpected error in a route becomes a JSON 500 answer while the server keeps going.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.middleware.trustedhost import TrustedHostMiddleware

from plguard.errors import InputError
from plguard_lab.view.page import render_page
from plguard_lab.view.state import ViewState

log = logging.getLogger(__name__)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class WhatIfRequest(BaseModel):
    """Edited predicate probabilities for one record."""

    key: str = Field(description="The record's key (method/id).")
    probs: dict[str, Any] = Field(description="Every predicate's probability in [0, 1].")
    flips: bool = Field(True, description="Also search for the smallest flipping change.")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def build_view_app(source: str | Path | ViewState, *, policy: str | None = None,
                   allowed_hosts: list[str] | None = None) -> FastAPI:
    """The viewer app for a run folder or trace file.

    Args:
        source: a run folder, a trace file, or an already built :class:`ViewState`.
        policy: a policy bundle name or folder to use instead of the run's own.
        allowed_hosts: Host header values accepted; default: the loopback names. Checking
            them keeps a web page from reaching the viewer through DNS rebinding.

    Returns:
        The FastAPI app; serve it with uvicorn on a loopback address.
    """
    state = source if isinstance(source, ViewState) else ViewState.from_source(source, policy)
    app = FastAPI(title="plguard view", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.view = state
    app.state.source = state.data.source
    app.state.policy = policy
    app.state.lock = threading.Lock()
    app.add_middleware(TrustedHostMiddleware,
                       allowed_hosts=list(allowed_hosts or LOOPBACK_HOSTS))

    def view() -> ViewState:
        state: ViewState = app.state.view
        return state

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("plguard view: %s %s failed", request.method, request.url.path)
        return _error(500, f"{type(exc).__name__}: {exc}")

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(render_page(None))

    @app.get("/api/run")
    def run() -> dict[str, Any]:
        return view().run_info()

    @app.get("/api/records")
    def records() -> list[dict[str, Any]]:
        return view().rows()

    @app.get("/api/record", response_model=None)
    def record(key: str) -> dict[str, Any] | JSONResponse:
        try:
            return view().record(key)
        except KeyError:
            return _error(404, f"no record {key!r}")

    @app.post("/api/whatif", response_model=None)
    def whatif(req: WhatIfRequest) -> dict[str, Any] | JSONResponse:
        try:
            return view().whatif(req.key, req.probs, with_flips=req.flips)
        except KeyError:
            return _error(404, f"no record {req.key!r}")
        except InputError as exc:
            return _error(400, str(exc))

    @app.get("/api/report")
    def report() -> dict[str, Any]:
        return view().report()

    @app.get("/files/{path:path}", response_model=None)
    def files(path: str) -> Response:
        f = view().run_file(path)
        if f is None:
            return _error(404, f"{path!r} is not a report or plot file of this run")
        return FileResponse(f)

    @app.post("/api/reload")
    def reload() -> dict[str, Any]:
        # Reloading re-reads files and may compile policies: one at a time.
        with app.state.lock:
            app.state.view = ViewState.from_source(app.state.source, app.state.policy)
        return {"records": len(app.state.view.records),
                "problems": len(app.state.view.problems)}

    return app


__all__ = ["LOOPBACK_HOSTS", "WhatIfRequest", "build_view_app"]

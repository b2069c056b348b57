"""Fixtures of the viewer tests: a small real run, real guard traces, an in-process client.

``data/run`` holds records copied from a real ``plguard eval xstest`` run on the embedded
model (four XSTest prompts, two safe and two unsafe, all four methods, semantic verdicts,
and the report ``plguard report`` wrote for it); ``data/traces.jsonl`` holds GuardResult
traces from ``Guard.batch`` on the same model. See ``data/SOURCE.md``.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

DATA = Path(__file__).parent / "data"
RUN = DATA / "run"
TRACES = DATA / "traces.jsonl"


@pytest.fixture
def run_copy(tmp_path: Path) -> Path:
    """A writable copy of the fixture run, for tests that damage it."""
    dst = tmp_path / "run"
    shutil.copytree(RUN, dst)
    return dst


def call(app: Any, method: str, url: str, **kw: Any) -> httpx.Response:
    """One request to ``app`` in process, through httpx's ASGI transport."""
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.request(method, url, **kw)

    return asyncio.run(go())

"""Fixtures of the server tests: guards on the embedded model, with and without faults."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="server tests need: pip install 'plguard[server]'")

from plguard import Guard, GuardConfig  # noqa: E402
from plguard.policy import load_policy  # noqa: E402

from .helpers import MAX_NEW_TOKENS, FaultSwitch  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_ambient_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # A key set in the developer's shell would turn every request here into a 401.
    monkeypatch.delenv("PLGUARD_API_KEY", raising=False)


@pytest.fixture(scope="session")
def minimal_policy():
    return load_policy("minimal")


@pytest.fixture(scope="session")
def real_guard(embedded_backend, minimal_policy) -> Guard:
    """The embedded model behind a Guard with short answers (16 new tokens)."""
    cfg = GuardConfig.from_dict({"generation": {"max_new_tokens": MAX_NEW_TOKENS}})
    return Guard(cfg, generator=embedded_backend, policy=minimal_policy)


@pytest.fixture
def switched_guard(embedded_backend, minimal_policy) -> tuple[Guard, FaultSwitch]:
    """The embedded model behind a FaultSwitch, so a test can break and mend it."""
    switch = FaultSwitch(embedded_backend)
    cfg = GuardConfig.from_dict({"generation": {"max_new_tokens": MAX_NEW_TOKENS}})
    return Guard(cfg, generator=switch, policy=minimal_policy), switch

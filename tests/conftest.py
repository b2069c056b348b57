"""Shared test options and fixtures.

Plain ``pytest`` runs everything that needs only a CPU (the embedded model included);
``--runslow`` adds long-running tests and ``--rungpu`` those that need CUDA.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run tests marked slow (CI passes this)")
    parser.addoption("--rungpu", action="store_true", default=False,
                     help="also run tests marked gpu (needs a CUDA device)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long-running test, run with --runslow")
    config.addinivalue_line("markers", "gpu: needs a CUDA device, run with --rungpu")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skips = {
        "slow": (config.getoption("--runslow"), "slow test: pass --runslow to run it"),
        "gpu": (config.getoption("--rungpu"), "needs a GPU: pass --rungpu to run it"),
    }
    for item in items:
        for marker, (enabled, reason) in skips.items():
            if marker in item.keywords and not enabled:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def embedded_backend():
    """TransformersBackend on the embedded model in float32 (tight exactness checks).

    Loaded through the backend pool, so other tests that ask for the same ModelConfig
    share this one load.
    """
    from plguard.backends import load_backend
    from plguard.config import ModelConfig

    return load_backend(ModelConfig(path="embedded", dtype="float32", device="cpu"))


@pytest.fixture(scope="session")
def embedded_backend_bf16():
    """The embedded model in bfloat16 (what 'auto' picks on CPUs with bf16 support)."""
    from plguard.backends import load_backend
    from plguard.config import ModelConfig

    return load_backend(ModelConfig(path="embedded", dtype="bfloat16", device="cpu"))

"""Server shutdown closes the Guard: the remote backend's connection pool and the cache."""

from __future__ import annotations

from typing import Any

import pytest

from plguard import Guard, GuardConfig
from plguard.server import build_app
from plguard.testing import LiveServer
from tests.backends import fake_openai
from tests.backends.fake_openai import fake_app

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    from plguard.models import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("embedded"), local_files_only=True)
    fake_openai.TRUE_IDS.update(tok.encode(w, add_special_tokens=False)[0]
                                for w in (" True", "True"))
    fake_openai.SECOND_SPELLINGS.update(tok.encode(w, add_special_tokens=False)[0]
                                        for w in ("True", "False"))
    return tok


async def test_app_shutdown_closes_the_guards_pools_and_cache(tokenizer, minimal_policy,
                                                              tmp_path):
    with LiveServer(fake_app(tokenizer)) as remote:
        cfg = GuardConfig.from_dict({
            "generator": {"backend": "openai", "base_url": remote.url + "/v1",
                          "max_retries": 1},
            "generation": {"max_new_tokens": 8},
            "grounding": {"cache": str(tmp_path / "g.sqlite")}})
        guard = Guard(cfg, policy=minimal_policy)
        app = build_app(guard)
        http = guard.generator.client._http
        cache = guard.grounder.cache
        assert cache is not None
        async with app.router.lifespan_context(app):
            guard.check([{"role": "user", "content": "Is water wet?"}], "Yes.")
            assert not http.is_closed and cache._open
        assert http.is_closed
        assert not cache._open
        guard.close()  # a second close is a no-op

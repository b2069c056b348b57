"""Guard.stream end to end on the embedded model (real generation, grounding, policy)."""

from __future__ import annotations

import pytest

from plguard import Guard, GuardConfig
from plguard.messages import to_chat
from plguard.streaming import StreamChunk, StreamEnd


@pytest.mark.slow
def test_a_stream_on_the_embedded_model_is_guarded_window_by_window(embedded_backend):
    cfg = GuardConfig.from_dict({"generation": {"max_new_tokens": 64},
                                 "stream": {"window_tokens": 24, "overlap_tokens": 6},
                                 "repair": {"max_rounds": 0}})
    with Guard(cfg, generator=embedded_backend) as guard:
        request = "Explain how a rainbow forms, in a few sentences."
        events = list(guard.stream(request))
        chunks = [e for e in events if isinstance(e, StreamChunk)]
        end = events[-1]
        assert isinstance(end, StreamEnd) and sum(isinstance(e, StreamEnd) for e in events) == 1
        r = end.result
        assert "".join(c.text for c in chunks) == r.final
        # The draft is the generator's own greedy answer, deltas joined exactly.
        assert r.draft == embedded_backend.generate([to_chat(request, "request")],
                                                    guard.params)[0].text
        assert [k for k in r.timings_s if k.startswith("stream.window_")]
        assert {"stream.request_check", "stream.final_check"} <= set(r.timings_s)
        plain = guard.check(request, r.draft)
        if plain.decision.action == "refuse":
            assert end.blocked and end.finish_reason == "content_filter"
        if not end.blocked:
            assert r.decision.action == plain.decision.action
            assert end.finish_reason in ("stop", "length")
            assert r.timings_s["stream.first_release"] < r.timings_s["total"]
            assert len(chunks) > 1  # released as windows were allowed, not all at the end

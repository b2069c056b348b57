"""The ``pool`` readout: the mean hidden state over the data block's tokens (real model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plguard.config import GroundingConfig
from plguard.grounding import Grounder
from plguard.policy import load_policy

LAYERS = (0, 15, 30)
REQUEST = "How do I kill a Python process?"
RESPONSE = "Run kill -9 followed by its PID."


@pytest.fixture(scope="module")
def grounder(embedded_backend):
    return Grounder(embedded_backend, load_policy("minimal").predicates,
                    GroundingConfig(heads=None))


def _reference_mean(backend, text: str, span: tuple[int, int], keep=None) -> np.ndarray:
    """The mean over the tokens whose characters lie in ``span``, found by offsets.

    An independent route to what the backend's pool reads: the tokenizer's own offset
    mapping picks the tokens, one plain forward over the (kept) ids gives the states.
    ``keep``: the positions of the full tokenisation that are forwarded (a cut prompt).
    """
    enc = backend.tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    ids, offs = enc["input_ids"], enc["offset_mapping"]
    keep = list(range(len(ids))) if keep is None else keep
    inside = [k for k, j in enumerate(keep) if offs[j][0] >= span[0] and offs[j][1] <= span[1]]
    assert inside, "the span covers no token"
    with torch.inference_mode():
        out = backend.model(input_ids=torch.tensor([[ids[j] for j in keep]]),
                            output_hidden_states=True)
    return np.stack([out.hidden_states[la][0, inside].float().mean(0).numpy()
                     for la in LAYERS])


def test_pool_spans_the_data_block(grounder):
    req = grounder.prompts(REQUEST, None)
    assert req.prefix[slice(*req.pool)] == REQUEST
    pair = grounder.prompts(REQUEST, RESPONSE)
    block = pair.prefix[slice(*pair.pool)]
    assert block.startswith(REQUEST) and block.endswith(RESPONSE)
    # The question-free request-end prompt of a pair read is no pool prompt.
    assert grounder.request_end_prompt(REQUEST).pool is None


def test_pool_state_is_the_mean_over_the_data_tokens(embedded_backend, grounder):
    reqs = [grounder.prompts(REQUEST, None), grounder.prompts(REQUEST, RESPONSE)]
    fast = embedded_backend.true_false_states(reqs, LAYERS)
    naive = embedded_backend.true_false_states_naive(reqs, LAYERS)
    for r, f, n in zip(reqs, fast, naive, strict=True):
        assert f.pool_state.shape == (len(LAYERS), 576)
        np.testing.assert_allclose(f.pool_state, n.pool_state, atol=1e-3)
        np.testing.assert_allclose(f.pool_state, _reference_mean(embedded_backend, r.prefix,
                                                                 r.pool), atol=1e-3)
        # It is not the prefix-end state the prefix readout takes.
        assert np.abs(f.pool_state[1] - f.prefix_state[1]).max() > 0.1
    # No layers asked for: no states at all, pool included.
    assert embedded_backend.true_false_states(reqs, ())[0].pool_state is None


def test_pool_of_a_cut_prompt_averages_the_kept_data_tokens(embedded_backend, grounder,
                                                            monkeypatch):
    long_request = " ".join(f"Step {i}: open the valve and wait." for i in range(60))
    req = grounder.prompts(long_request, None)
    full = embedded_backend.encode(req.prefix)
    longest = max(len(embedded_backend.encode(s)) for s in req.suffixes)
    room = 200
    monkeypatch.setattr(embedded_backend, "max_context", room + longest)
    ids, _, truncated = embedded_backend.request_ids(req)
    assert truncated and len(ids) == room < len(full)
    head = room // 2  # request_ids keeps the head (instructions) and the tail
    keep = [*range(head), *range(len(full) - (room - head), len(full))]
    assert [full[j] for j in keep] == ids
    got = embedded_backend.true_false_states([req], LAYERS)[0].pool_state
    np.testing.assert_allclose(got, _reference_mean(embedded_backend, req.prefix, req.pool,
                                                    keep), atol=1e-3)


def test_a_pool_span_outside_the_prefix_is_refused(embedded_backend, grounder):
    from dataclasses import replace

    req = grounder.prompts(REQUEST, None)
    with pytest.raises(Exception, match="pool span"):
        embedded_backend.true_false_states([replace(req, pool=(5, len(req.prefix) + 1))],
                                           LAYERS)


def test_an_empty_request_pools_its_last_token(embedded_backend, grounder, tmp_path):
    from plguard.heads.artefact import load_heads
    from tests.heads.test_heads import _heads_doc, _write

    req = grounder.prompts("", None)
    assert req.pool[0] == req.pool[1]
    out = embedded_backend.true_false_states([req], LAYERS)[0]
    np.testing.assert_allclose(out.pool_state, out.prefix_state, atol=1e-5)
    # A Grounder whose heads read pool grounds it (screening can empty a request).
    minimal = load_policy("minimal")
    cfg = GroundingConfig(heads=None)
    path = _write(tmp_path, _heads_doc(embedded_backend, minimal, cfg,
                                       readouts=["pool", "pool", "pool", "pool"]))
    g = Grounder(embedded_backend, minimal.predicates,
                 cfg.model_copy(update={"heads": str(path)}), policy_name="minimal")
    got = g.ground([("", "")])[0]  # empty response too: both scopes pool nothing
    assert got.heads == load_heads(path).label
    assert all(0.0 < s.p_true < 1.0 for s in got.scores if s.source == "head")

"""A forward that stops after the deepest layer read (plguard.backends.depth)."""

from __future__ import annotations

import pytest


class _Model:
    """Not a transformers causal LM: no ``model.layers``."""


def test_a_model_without_decoder_layers_or_a_read_of_the_ends_runs_whole():
    from plguard.backends.depth import can_stop, decoder_layers

    assert decoder_layers(_Model()) is None and not can_stop(_Model(), (3,))


@pytest.mark.slow
def test_states_equal_the_whole_forward_and_the_layers_above_never_run(embedded_backend):
    import torch

    from plguard.backends.depth import can_stop, decoder_layers, states_to

    b = embedded_backend
    blocks = decoder_layers(b.model)
    n = len(blocks)
    assert can_stop(b.model, (9, 15)) and not can_stop(b.model, (0, 15))
    assert not can_stop(b.model, (15, n))  # the last state is returned normalised
    ran: list[int] = []
    handles = [blk.register_forward_hook(lambda m, a, o, i=i: ran.append(i))
               for i, blk in enumerate(blocks)]
    ids = torch.tensor([b.encode("Sourdough needs patience, flour, water and salt.")])
    try:
        with torch.inference_mode():
            got = states_to(b.model, (15, 9), input_ids=ids, logits_to_keep=1)
            assert ran == list(range(15))  # layers 1..15 (0-based 0..14), none above
            ran.clear()
            whole = b.model(input_ids=ids, logits_to_keep=1, output_hidden_states=True)
            assert ran == list(range(n))
            ran.clear()
            last = states_to(b.model, (15, n), input_ids=ids, logits_to_keep=1)
            assert ran == list(range(n))
    finally:
        for h in handles:
            h.remove()
    assert set(got) == {9, 15}
    for x in (9, 15):
        assert torch.equal(got[x], whole.hidden_states[x])  # the same operations: bitwise
    assert torch.equal(last[n], whole.hidden_states[n])

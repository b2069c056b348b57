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
    # Pre-hooks: they run before a layer, whatever other hooks the layer has and in which
    # order (states_to's own stay on the model once installed).
    handles = [blk.register_forward_pre_hook(lambda m, a, i=i: ran.append(i))
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


@pytest.mark.slow
def test_another_threads_forward_runs_through_the_hooks_untouched(embedded_backend):
    """A draft generating on the same model while a read stops early (a stream, or the
    server's batches): the hooks act on the reading thread's forward only."""
    import threading

    import torch

    from plguard.backends.depth import states_to

    b = embedded_backend
    ids = torch.tensor([b.encode("Bread rises because yeast makes gas.")])
    with torch.inference_mode():
        whole = b.model(input_ids=ids, logits_to_keep=1).logits
    errors: list[BaseException] = []
    outs: list[torch.Tensor] = []
    go = threading.Event()

    def other() -> None:
        try:
            go.wait()
            with torch.inference_mode():
                for _ in range(6):
                    outs.append(b.model(input_ids=ids, logits_to_keep=1).logits)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=other)
    t.start()
    go.set()
    with torch.inference_mode():
        for _ in range(6):
            assert set(states_to(b.model, (9,), input_ids=ids)) == {9}
    t.join()
    assert not errors and len(outs) == 6
    assert all(torch.equal(o, whole) for o in outs)

"""One forward at a time, in arrival order; torch's pool sized from the cores (threads.py)."""

from __future__ import annotations

import inspect
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from plguard.backends.threads import (  # noqa: E402
    FairLock,
    apply_threads,
    default_threads,
    serialise,
    usable_cores,
)


class Probe(torch.nn.Module):
    """Counts forwards running at once."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def forward(self, x, scale: float = 1.0):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.01)
        out = self.lin(x) * scale
        with self.lock:
            self.running -= 1
        return out


def _hammer(model, n_threads=4, calls=5):
    def work():
        for _ in range(calls):
            model(torch.zeros(1, 4))

    ts = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_serialised_forwards_never_overlap():
    plain = Probe()
    _hammer(plain)
    assert plain.most > 1  # without the lock they do overlap: the probe can see it
    m = serialise(Probe())
    _hammer(m)
    assert m.most == 1


def test_serialise_keeps_the_signature_and_is_idempotent():
    m = serialise(Probe())
    f = m.forward
    assert serialise(m) is m and m.forward is f
    assert list(inspect.signature(m.forward).parameters) == ["x", "scale"]
    assert torch.equal(m(torch.ones(1, 4), scale=0.0), torch.zeros(1, 4))


def test_the_lock_is_handed_over_in_arrival_order():
    lock = FairLock()
    order: list[int] = []
    lock.acquire()
    started = []

    def waiter(i: int) -> None:
        started.append(i)
        with lock:
            order.append(i)

    ts = []
    for i in range(5):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        ts.append(t)
        while len(started) <= i or len(lock._waiters) <= i:  # queued before the next
            time.sleep(0.001)
    lock.release()
    for t in ts:
        t.join()
    assert order == [0, 1, 2, 3, 4]


def test_a_releasing_thread_cannot_take_it_straight_back():
    # The drafting stream's case: it releases between tokens and asks again at once; a
    # check already waiting goes first.
    lock = FairLock()
    got: list[str] = []
    lock.acquire()
    t = threading.Thread(target=lambda: (lock.acquire(), got.append("check"), lock.release()))
    t.start()
    while not lock._waiters:
        time.sleep(0.001)
    lock.release()
    lock.acquire()
    got.append("draft")
    lock.release()
    t.join()
    assert got == ["check", "draft"]


def test_reentry_and_a_foreign_release():
    lock = FairLock()
    with lock, lock:
        pass
    with pytest.raises(RuntimeError, match="does not hold it"):
        lock.release()


def test_threads_from_config_env_or_cores(monkeypatch):
    before = torch.get_num_threads()
    try:
        assert default_threads() == max(1, usable_cores() - 1)
        assert apply_threads(1) == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert apply_threads(None) == torch.get_num_threads()  # the user's choice stands
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert apply_threads(None) == default_threads() == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_the_config_names_threads():
    from plguard.config import GuardConfig
    from plguard.errors import ConfigError

    assert GuardConfig().generator.threads is None
    assert GuardConfig.from_dict({"generator": {"threads": 2}}).generator.threads == 2
    with pytest.raises(ConfigError, match="threads"):
        GuardConfig.from_dict({"generator": {"threads": 0}})

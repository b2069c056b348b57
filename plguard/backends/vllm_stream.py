"""Streaming generation on the in-process vLLM engine, beside its batched calls.

The engine is ``vllm.LLM``'s (one per process, shared by every role); a stream adds one
request to it and steps it one engine step at a time, under the engine's call lock for each
step only, so grounding calls on the same engine run between steps (the guard grounds a
window while the next is generated). ``LLM.generate`` steps the engine until *no* request
is unfinished and collects every finished output, so a stream's request would be run to
its end and its output mixed into the batch's results. A :class:`_Router` installed on the
engine prevents both: the step outputs of streamed requests go to their own queues, and
streamed requests do not count as unfinished for the batched loop. A cancelled or closed
stream aborts its request, freeing its KV cache at once.

vLLM is imported only inside these functions (``import plguard`` stays light).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection, Iterator
from typing import Any, Protocol

from plguard.backends.deltas import Deltas
from plguard.types import Chat, GenerationParams


class EngineBackend(Protocol):
    """What a stream needs of :class:`~plguard.backends.vllm_backend.VLLMBackend`.

    A protocol, not the class, so this module does not import the backend (which imports
    it for ``stream_generate``): the import runs one way.
    """

    @property
    def llm(self) -> Any:
        """The ``vllm.LLM`` whose engine is stepped."""
        ...

    @property
    def call_lock(self) -> threading.Lock:
        """The engine's call lock, held for each engine step."""
        ...

    @property
    def tokenizer(self) -> Any:
        """The tokenizer that decodes the deltas."""
        ...

    @property
    def model_id(self) -> str:
        """The model's name, for errors."""
        ...

    @property
    def max_context(self) -> int:
        """The context window in tokens."""
        ...

    @property
    def eos_ids(self) -> Collection[int]:
        """The token ids that end a completion."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added special tokens."""
        ...

    def format_chat(self, chat: Chat, add_generation_prompt: bool = True) -> str:
        """Render a chat with the model's chat template, as text."""
        ...


class _Router:
    """Splits an engine's step outputs between streams and ``LLM._run_engine``."""

    def __init__(self, engine: Any) -> None:
        self._step = engine.step
        self._unfinished = engine.get_num_unfinished_requests
        self.queues: dict[str, list[Any]] = {}
        self.live: set[str] = set()  # streamed requests the engine still runs
        # Instance attributes shadow the methods LLM._run_engine calls on the engine.
        engine.step = self.step
        engine.has_unfinished_requests = self.has_unfinished

    def step(self) -> list[Any]:
        rest = []
        for out in self._step():
            queue = self.queues.get(out.request_id)
            if queue is None:
                rest.append(out)
                continue
            queue.append(out)
            if out.finished:
                self.live.discard(out.request_id)
        return rest

    def has_unfinished(self) -> bool:
        return int(self._unfinished()) > len(self.live)

    def open(self, rid: str) -> None:
        self.queues[rid] = []
        self.live.add(rid)

    def take(self, rid: str) -> list[Any]:
        outs, self.queues[rid] = self.queues[rid], []
        return outs

    def close(self, rid: str) -> None:
        self.queues.pop(rid, None)
        self.live.discard(rid)


def _router(engine: Any) -> _Router:
    router = engine.__dict__.get("_plguard_router")
    if router is None:
        router = engine._plguard_router = _Router(engine)
    return router


def stream_generate(backend: EngineBackend, chat: Chat, params: GenerationParams,
                    cancel: threading.Event) -> Iterator[str]:
    """Text deltas of one completion, joined equal to ``backend.generate``'s text.

    The prompt is the chat rendered and tokenised here (``TokensPrompt``), cut to its last
    tokens when it leaves no room, as ``generate`` cuts it.
    """
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    from plguard.backends._vllm_errors import call_error

    max_new = max(1, min(params.max_new_tokens, backend.max_context - 1))
    ids = backend.encode(backend.format_chat(chat))[-(backend.max_context - max_new):]
    sample = not params.greedy
    sp = SamplingParams(
        n=1, max_tokens=max_new, temperature=params.temperature if sample else 0.0,
        top_p=params.top_p if sample else 1.0, seed=params.seed if sample else None,
        detokenize=False, output_kind=RequestOutputKind.DELTA)
    rid = f"plguard-stream-{uuid.uuid4().hex}"
    engine = backend.llm.llm_engine
    lock = backend.call_lock
    with lock:
        router = _router(engine)
        router.open(rid)
        try:
            engine.add_request(rid, TokensPrompt(prompt_token_ids=ids), sp)
        except Exception as exc:
            router.close(rid)
            raise call_error(exc, "streamed generation", backend.model_id) from exc
    deltas, new, done = Deltas(), [], False
    try:
        while not done and not cancel.is_set():
            with lock:
                try:
                    if not router.queues[rid]:  # a batched call may have stepped for us
                        router.step()
                except Exception as exc:
                    raise call_error(exc, "streamed generation", backend.model_id) from exc
                outs = router.take(rid)
            for out in outs:
                new.extend(out.outputs[0].token_ids)
                done = done or out.finished
            n = next((j for j, t in enumerate(new) if t in backend.eos_ids), len(new))
            done = done or n < len(new)
            piece = deltas.push(backend.tokenizer.decode(new[:n], skip_special_tokens=True))
            if piece:
                yield piece
    finally:
        with lock:
            if rid in router.live:
                try:
                    engine.abort_request([rid])
                except Exception:  # the engine is gone: nothing left to free
                    pass
            router.close(rid)


__all__ = ["EngineBackend", "stream_generate"]

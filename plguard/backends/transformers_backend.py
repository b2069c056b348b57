"""The transformers backend: batched generation and prefix-shared True/False scoring.

Grounding asks k yes/no questions about the same (request, response). The shared prefix
(instructions and data) is forwarded once; its KV cache is repeated for the k question
suffixes, which are scored in one batched forward. The token sequence of question ``i``
is defined once, as ``ids(prefix) + ids(suffix_i)`` with each part tokenised on its own,
and both the fast path and :meth:`TransformersBackend.true_false_logprobs_naive` use it:
tokenising the joined string instead would give other ids and other probabilities.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from plguard.backends._structured import SchemaConstraint
from plguard.backends._text import TokenizerText
from plguard.backends.base import Capabilities, StatedScores
from plguard.backends.deltas import Deltas
from plguard.backends.depth import states_to
from plguard.backends.threads import apply_threads, serialise
from plguard.backends.token_ids import request_ids
from plguard.backends.torch_reference import ReferencePaths
from plguard.backends.torch_states import (
    Cancelled,
    cpu_supports_bf16,
    finite,
    mean_states,
    repeat_cache,
    resolve_dtype,
    states_at_last,
)
from plguard.errors import BackendError, ModelError
from plguard.models import resolve_model_path
from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore

if TYPE_CHECKING:
    import torch

    from plguard.config import ModelConfig

_ADVICE = "lower model.batch_size / grounding.batch_size or max_data_tokens, or use dtype float32"


# Most padded tokens in one batched forward of question-free pooled reads (about 0.1 GB of
# activations per layer kept on the embedded model).
POOL_BATCH_TOKENS = 4096


class TransformersBackend(ReferencePaths, TokenizerText):
    """A Hugging Face causal LM that generates and scores True/False continuations."""

    supports_json_schema = True  # GenerationParams.json_schema constrains decoding (outlines-core)
    capabilities = Capabilities(hidden_states=True)  # true_false_states

    def __init__(self, model: Any, tokenizer: Any, *, model_id: str,
                 max_context: int | None = None, batch_size: int = 8,
                 tf_batch_size: int | None = None) -> None:
        self.model = serialise(model)  # one forward at a time in this process (threads.py)
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.local_path: str | None = None  # the resolved model folder, when loaded from one
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        cfg_ctx = getattr(model.config, "max_position_embeddings", None) or 2048
        self.max_context = int(max_context or cfg_ctx)
        self.batch_size = batch_size
        self.tf_batch_size = tf_batch_size
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_id = int(tokenizer.pad_token_id)
        self.true_ids, self.false_ids = self._answer_ids()
        self._schemas: SchemaConstraint | None = None

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> TransformersBackend:
        """Load the model named by ``cfg`` (offline), in the configured dtype and device."""
        return cls.load(cfg.path, dtype=cfg.dtype, device=cfg.device,
                        max_context=cfg.max_context, batch_size=cfg.batch_size,
                        threads=cfg.threads)

    @classmethod
    def load(cls, path: str = "embedded", *, dtype: str = "auto", device: str = "auto",
             max_context: int | None = None, batch_size: int = 8,
             threads: int | None = None) -> TransformersBackend:
        """Load a model folder, hub id or ``'embedded'``; ``threads``: see ModelConfig."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        apply_threads(threads)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ModelError(f"device '{device}' requested but CUDA is not available; "
                             "set model.device to 'cpu' or 'auto'")
        local = resolve_model_path(path)
        tdtype = resolve_dtype(dtype, device)
        try:
            tok = AutoTokenizer.from_pretrained(local, local_files_only=True)
            model: Any = AutoModelForCausalLM.from_pretrained(local, dtype=tdtype,
                                                              local_files_only=True)
        except Exception as exc:
            raise ModelError(f"cannot load model '{path}' from {local}: "
                             f"{type(exc).__name__}: {exc}. The folder needs config.json, "
                             "tokenizer files and weights (safetensors).") from exc
        model.to(device).eval()
        tok.padding_side = "left"
        dtype_name = str(tdtype).removeprefix("torch.")
        shown = path if path != "embedded" else "embedded:smollm2-135m-instruct"
        backend = cls(model, tok, model_id=f"{shown}:{dtype_name}", max_context=max_context,
                      batch_size=batch_size)
        backend.local_path = local
        return backend

    # -- generation ------------------------------------------------------------------------

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        """Generate one completion per chat, batched with left padding."""
        out: list[Generation] = []
        for start in range(0, len(chats), self.batch_size):
            out.extend(self._generate_batch(chats[start:start + self.batch_size], params))
        return out

    def _inputs(self, chats: Sequence[Chat], params: GenerationParams
                ) -> tuple[Any, Any, dict[str, Any], list[list[int]], list[bool]]:
        """Left-padded ids and mask, generate() keyword arguments, prompts, cut flags."""
        import torch

        max_new = max(1, min(params.max_new_tokens, self.max_context - 1))
        limit = self.max_context - max_new
        prompts, flags = [], []
        for chat in chats:
            ids = self.encode(self.format_chat(chat))
            flags.append(len(ids) > limit)
            prompts.append(ids[-limit:] if len(ids) > limit else ids)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        sample = not params.greedy
        kwargs: dict[str, Any] = {"max_new_tokens": max_new, "do_sample": sample,
                                  "pad_token_id": self.pad_id}
        if sample:
            torch.manual_seed(params.seed)
            kwargs.update(temperature=params.temperature, top_p=params.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        return input_ids.to(self.device), mask.to(self.device), kwargs, prompts, flags

    def _generate_batch(self, chats: Sequence[Chat], params: GenerationParams
                        ) -> list[Generation]:
        import torch

        input_ids, mask, kwargs, prompts, flags = self._inputs(chats, params)
        width = input_ids.shape[1]
        constrained = params.json_schema is not None
        if constrained:
            kwargs["logits_processor"] = self._schema_processors(params.json_schema)
        try:
            with torch.inference_mode():
                gen = self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
        except RuntimeError as exc:
            raise BackendError(f"generation failed on {self.model_id}: {exc}; {_ADVICE}"
                               ) from exc
        eos = self._eos_ids()
        results = []
        for i, p in enumerate(prompts):
            new = gen[i, width:].tolist()
            n = next((j for j, t in enumerate(new) if t in eos), len(new))
            text = self.tokenizer.decode(new[:n], skip_special_tokens=True).strip()
            results.append(Generation(text=text, n_prompt_tokens=len(p), n_new_tokens=n,
                                      prompt_truncated=flags[i], constrained=constrained))
        return results

    def stream_generate(self, chat: Chat, params: GenerationParams,
                        cancel: threading.Event) -> Iterator[str]:
        """One completion as text deltas that join to exactly ``generate``'s text.

        ``model.generate`` runs in a thread feeding a ``TextIteratorStreamer`` (which
        decodes whole words); :class:`~plguard.backends.deltas.Deltas` strips the text as
        ``generate`` does and holds back an incomplete character. A stopping criterion ends
        generation at the next token once ``cancel`` is set or the iterator is closed, and
        closing waits for the thread. ``json_schema`` is not applied: a stream is free text.
        """
        import torch
        from transformers import StoppingCriteriaList, TextIteratorStreamer

        input_ids, mask, kwargs, _, _ = self._inputs([chat], params)
        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True,
                                        skip_special_tokens=True)
        closed = threading.Event()  # the caller's event is the caller's: never set here
        kwargs.update(streamer=streamer,
                      stopping_criteria=StoppingCriteriaList([Cancelled(cancel, closed)]))
        failed: list[BaseException] = []

        def run() -> None:
            try:
                with torch.inference_mode():
                    self.model.generate(input_ids=input_ids, attention_mask=mask, **kwargs)
            except BaseException as exc:  # re-raised on the consuming side
                failed.append(exc)
                streamer.end()

        worker = threading.Thread(target=run, daemon=True, name="plguard-generate")
        worker.start()
        deltas, text = Deltas(), ""
        try:
            for piece in streamer:
                text += piece
                out = deltas.push(text)
                if out:
                    yield out
            if failed:
                raise BackendError(f"generation failed on {self.model_id}: {failed[0]}; "
                                   f"{_ADVICE}") from failed[0]
        finally:
            closed.set()
            worker.join()

    def _schema_processors(self, schema: Any) -> Any:
        from transformers import LogitsProcessorList

        if self._schemas is None:
            self._schemas = SchemaConstraint(self.tokenizer, int(self.model.config.vocab_size),
                                             self._eos_ids())
        return LogitsProcessorList([self._schemas.processor(str(schema))])

    def _eos_ids(self) -> set[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return ids

    # -- True/False scoring ----------------------------------------------------------------

    def request_ids(self, req: TFRequest) -> tuple[list[int], list[list[int]], bool]:
        """The canonical token ids of a request (:func:`plguard.backends.token_ids.request_ids`)."""
        return request_ids(self.encode, self.max_context, req)

    def true_false_logprobs(self, requests: Sequence[TFRequest]) -> list[list[TFScore]]:
        """Score every suffix of each request after its once-forwarded shared prefix."""
        return [r.scores for r in self.true_false_states(requests, ())]

    @property
    def n_layers(self) -> int:
        """Decoder layers: hidden state ``i`` (0 = embeddings) exists for 0..n_layers."""
        return int(self.model.config.num_hidden_layers)

    def true_false_states(self, requests: Sequence[TFRequest], layers: Sequence[int]
                          ) -> list[StatedScores]:
        """:meth:`true_false_logprobs` plus the hidden states learned heads read.

        For each request: every suffix's hidden state at its last token (the answer
        position, where True/False would come next) and the prefix's at its last token
        (the end of the data: a read with no question), at each of ``layers`` (0 is the
        embedding output). Same forwards and token ids as the scores, so they come at the
        cost of keeping a few vectors. With ``layers`` empty no state is kept.
        """
        import torch

        bad = [x for x in layers if not 0 <= x <= self.n_layers]
        if bad:
            raise BackendError(f"hidden-state layers {bad} out of range for {self.model_id} "
                               f"(0..{self.n_layers})")
        lay = tuple(layers)
        # Question-free reads of a span's mean (the views of plguard.grounding.alone) are
        # short and many: one padded forward serves a batch of them.
        pooled = [i for i, r in enumerate(requests)
                  if lay and not r.suffixes and not r.marks and r.pool is not None]
        results: list[StatedScores | None] = [None] * len(requests)
        try:
            with torch.inference_mode():
                for i, out in zip(pooled, self._pooled_batch([requests[i] for i in pooled], lay),
                                  strict=True):
                    results[i] = out
                for i, req in enumerate(requests):
                    if results[i] is None:
                        results[i] = self._score_shared(req, lay)
        except RuntimeError as exc:
            raise BackendError(f"grounding forward failed on {self.model_id}: {exc}; "
                               f"{_ADVICE}") from exc
        return [r for r in results if r is not None]

    def _pooled_batch(self, reqs: Sequence[TFRequest], layers: tuple[int, ...]
                      ) -> list[StatedScores]:
        """Question-free requests with a pool span, batched by length into few forwards.

        Each forward holds rows of one length, so nothing is padded and each row's states
        are its own; the pool positions are :meth:`_pool_positions`, as on the
        one-request path.
        """
        import torch

        rows = []
        for r in reqs:
            ids, _, truncated = self.request_ids(r)
            ids = ids or [self.pad_id]
            rows.append((ids, self._pool_positions(r, len(ids), truncated)))
        out: list[StatedScores | None] = [None] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
        start = 0
        while start < len(order):
            # Rows of the same length together (no padding: a row's states then do not
            # depend on what it was batched with, down to the last bit), at most
            # POOL_BATCH_TOKENS tokens. Answer windows are mostly of one length.
            n0 = len(rows[order[start]][0])
            stop = start + 1
            while (stop < len(order) and len(rows[order[stop]][0]) == n0
                   and (stop + 1 - start) * n0 <= POOL_BATCH_TOKENS):
                stop += 1
            chunk = order[start:stop]
            ids_t = torch.tensor([rows[i][0] for i in chunk], dtype=torch.long)
            mask = torch.ones_like(ids_t)
            # No logits are read here: the forward stops after the deepest layer read.
            hidden = states_to(self.model, layers, input_ids=ids_t.to(self.device),
                               attention_mask=mask.to(self.device), logits_to_keep=1)
            for j, i in enumerate(chunk):
                ids, pos = rows[i]
                at = torch.tensor(pos, device=self.device)
                pool = torch.stack([hidden[x][j, at].float().mean(0) for x in layers])
                last = torch.stack([hidden[x][j, len(ids) - 1] for x in layers])
                out[i] = StatedScores([], None, last.float().cpu().numpy(), None,
                                      pool.cpu().numpy())
            start = stop
        return [o for o in out if o is not None]

    def _score_shared(self, req: TFRequest, layers: tuple[int, ...] = ()) -> StatedScores:
        import numpy as np
        import torch

        prefix, suffixes, truncated = self.request_ids(req)
        ids_tf = self.answer_ids(req.answers)
        want = bool(layers)
        if not suffixes and not want:
            return StatedScores([], None, None)
        if not prefix:  # nothing to cache: every question is scored on its own ids
            rows = [self._score_ids(s, truncated, ids_tf, layers) for s in suffixes]
            return StatedScores([r.scores[0] for r in rows],
                                np.stack([r.answer_states[0] for r in rows]) if want and rows
                                else None, None)
        n_pre = len(prefix)
        if suffixes:
            # Only the suffixes' logits are read: the prefix's over the vocabulary would
            # cost a tenth of the forward on a small model for nothing.
            pre = self.model(input_ids=torch.tensor([prefix], device=self.device),
                             use_cache=True, logits_to_keep=1, output_hidden_states=want)
            hidden, base_cache = pre.hidden_states, pre.past_key_values
        else:  # no question: only states are read, so the forward stops at the deepest
            hidden = states_to(self.model, layers, logits_to_keep=1,
                               input_ids=torch.tensor([prefix], device=self.device))
            base_cache = None
        pre_state = states_at_last(hidden, layers)[0] if want else None
        marks = (self._mark_states(req, prefix, truncated, hidden, layers)
                 if want and req.marks else None)
        pool = (mean_states(hidden, self._pool_positions(req, len(prefix), truncated),
                            layers)
                if want and req.pool is not None else None)
        scores: list[TFScore] = []
        answer_states: list[Any] = []
        # The request's own limit (grounding.batch_size) first; the backend's (tests,
        # direct use) else; all suffixes in one forward when neither is set.
        step = req.batch_size or self.tf_batch_size or max(1, len(suffixes))
        for start in range(0, len(suffixes), step):
            chunk = suffixes[start:start + step]
            k, width = len(chunk), max(len(s) for s in chunk)
            # Suffixes are left-padded inside the batch: each row's last real token sits in
            # the final column, so only k logit rows are computed. The pads are masked out
            # and real tokens keep the positions they have in the naive sequence, so each
            # row attends to exactly prefix + its own tokens.
            ids = torch.full((k, width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((k, n_pre + width), dtype=torch.long)
            mask[:, :n_pre] = 1
            pos = torch.full((k, width), n_pre, dtype=torch.long)
            for i, s in enumerate(chunk):
                pad = width - len(s)
                ids[i, pad:] = torch.tensor(s, dtype=torch.long)
                mask[i, n_pre + pad:] = 1
                pos[i, pad:] = torch.arange(n_pre, n_pre + len(s))
            out = self.model(input_ids=ids.to(self.device),
                             attention_mask=mask.to(self.device),
                             position_ids=pos.to(self.device),
                             past_key_values=repeat_cache(base_cache, k),
                             use_cache=True, logits_to_keep=1, output_hidden_states=want)
            scores.extend(self._tf_from_logits(out.logits[:, -1], truncated, ids_tf))
            if want:
                answer_states.append(states_at_last(out.hidden_states, layers))
        return StatedScores(scores, np.concatenate(answer_states) if answer_states else None,
                            pre_state, marks, pool)

    def _pool_positions(self, req: TFRequest, n_ids: int, truncated: bool) -> list[int]:
        """Positions, among the forwarded prefix ids, of the tokens of ``req.pool``.

        The span's ends are token counts of the prefix cut there (a token the whole prefix
        merges across an end is counted with the side it starts on). In a prefix cut to
        fit (head and tail kept, :meth:`request_ids`), the dropped middle's tokens are not
        in the mean; an empty span, or one dropped whole, reads the last kept token.
        """
        assert req.pool is not None
        a, b = req.pool
        if not 0 <= a <= b <= len(req.prefix):
            raise BackendError(f"pool span {req.pool} outside the prompt prefix "
                               f"(0..{len(req.prefix)})")
        lo, hi = len(self.encode(req.prefix[:a])), len(self.encode(req.prefix[:b]))
        if not truncated:
            pos = list(range(min(lo, n_ids - 1), min(hi, n_ids)))
        else:
            head = n_ids // 2
            t0 = len(self.encode(req.prefix)) - (n_ids - head)  # first kept tail token
            pos = [j if j < head else j - t0 + head for j in range(lo, hi)
                   if j < head or j >= t0]
        return pos or [n_ids - 1]

    def _mark_ids(self, req: TFRequest, mark: int) -> list[int]:
        if not 0 < mark <= len(req.prefix):
            raise BackendError(f"state mark {mark} outside the prompt prefix "
                               f"(1..{len(req.prefix)})")
        return self.encode(req.prefix[:mark])

    def _mark_states(self, req: TFRequest, prefix: list[int], truncated: bool, hidden: Any,
                     layers: tuple[int, ...]) -> Any:
        """``[n_marks, n_layers, d]``: the states a forward over each ``prefix[:mark]`` ends with.

        Read from the prefix forward where the mark's ids begin the prefix's ids; a mark that
        splits a token the whole prefix merges (or a prefix cut to fit) gets its own forward,
        so the state is always the one its definition names.
        """
        import numpy as np
        import torch

        out = []
        for m in req.marks:
            head = self._mark_ids(req, m)
            if not truncated and prefix[:len(head)] == head:
                out.append(torch.stack([hidden[i][0, len(head) - 1] for i in layers])
                           .float().cpu().numpy())
            else:
                out.append(self._last_states(head, layers))
        return np.stack(out)

    def _last_states(self, ids: list[int], layers: tuple[int, ...]) -> Any:
        """``[n_layers, d]`` at the last of ``ids`` (head and tail kept when too long)."""
        import torch

        room = self.max_context
        if len(ids) > room:
            ids = ids[:room // 2] + ids[len(ids) - (room - room // 2):]
        hidden = states_to(self.model, layers, logits_to_keep=1,
                           input_ids=torch.tensor([ids], device=self.device))
        return states_at_last(hidden, layers)[0]

    def _score_ids(self, ids: list[int], truncated: bool,
                   ids_tf: tuple[tuple[int, ...], tuple[int, ...]],
                   layers: tuple[int, ...] = ()) -> StatedScores:
        import torch

        res = self.model(input_ids=torch.tensor([ids], device=self.device), logits_to_keep=1,
                         output_hidden_states=bool(layers))
        return StatedScores(self._tf_from_logits(res.logits[:, -1], truncated, ids_tf),
                            states_at_last(res.hidden_states, layers) if layers else None,
                            None)

    def _tf_from_logits(self, logits: torch.Tensor, truncated: bool,
                        ids_tf: tuple[tuple[int, ...], tuple[int, ...]]) -> list[TFScore]:
        import torch

        lp = torch.log_softmax(logits.float(), dim=-1)
        lt = torch.logsumexp(lp[:, list(ids_tf[0])], dim=-1).tolist()
        lf = torch.logsumexp(lp[:, list(ids_tf[1])], dim=-1).tolist()
        return [TFScore(logprob_true=finite(a), logprob_false=finite(b), truncated=truncated)
                for a, b in zip(lt, lf, strict=True)]


__all__ = ["TransformersBackend", "cpu_supports_bf16", "resolve_dtype"]

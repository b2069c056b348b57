"""The ``openai`` backend: generate and ground through an OpenAI-compatible server.

The model runs elsewhere (``vllm serve``, llama.cpp's server, Ollama, ...); this process
holds only the model's tokenizer and chat template (``model.path``: a local folder, a
cached Hugging Face id or ``embedded``), never its weights.

- Generation: ``/v1/chat/completions``, one request per chat, at most
  ``model.max_concurrency`` in flight. A chat longer than the context window is cut to
  its last tokens and sent as token ids to ``/v1/completions``, as the vLLM backend does.
  A ``json_schema`` goes as ``response_format`` (chat) or vLLM's ``structured_outputs``
  (completions); a server refusing it is asked again without, once and for all.
  ``stream_generate`` asks the same endpoints with ``stream: true`` and yields the SSE
  deltas (joined, what ``generate`` returns); closing it drops the connection, which makes
  vLLM's server abort the request.
- Grounding, **exact** mode: the prompt is rendered here with the model's own chat
  template, tokenised exactly as the in-process backends tokenise it (``ids(prefix) +
  ids(suffix)``) and sent as token ids, so the server re-tokenises nothing; the
  full-vocabulary log-probabilities of every True/False spelling at the answer position
  come back and are merged by logsumexp. vLLM's ``logprob_token_ids`` gives all of them in
  one request per question; servers without it but with ``echo`` get one prompt per
  spelling with the spelling appended, scored from its prompt log-probability (the way
  lm-evaluation-harness's ``local-completions`` scores). Every prompt puts the shared data
  prefix first, so the server's prefix cache serves it; one request per question, several
  in flight, measured faster on vLLM than one request per prefix (about 1.3x, 144
  questions) or than warming the prefix with one question first.
- Grounding, **top-k** mode: the top log-probabilities of one token, read either from
  ``/v1/completions`` with ``logprobs: k`` on the prompt rendered here as text (tried
  first: the answer cue stays where exact mode puts it), or from
  ``/v1/chat/completions`` with ``top_logprobs`` (the OpenAI-standard shape llama.cpp's
  and Ollama's servers speak), the answer cue sent as a final assistant message to
  continue. An answer none of whose spellings is in the top-k is bounded by the smallest
  returned log-probability and the score is flagged (``TFScore.bound``). Over chat the
  server applies its own chat template, so :meth:`format_chat` then renders the chat in a
  private wire form (role markers with a random per-process nonce that data cannot forge)
  which is split back into messages before sending.

The mode (``model.logprobs_mode``) is probed once at start; a server that offers neither
is refused with a clear error. Failures follow :mod:`plguard.backends.openai_client`.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from plguard.backends._text import TokenizerText
from plguard.backends.base import Capabilities
from plguard.backends.deltas import Deltas
from plguard.backends.logprobs import finite, logsumexp
from plguard.backends.openai_client import OpenAIClient, RemoteStatusError, Reply, usage_of
from plguard.backends.openai_replies import (
    Unsupported,
    choice_at,
    choose_model,
    context_of,
    echo_lp,
    merge_spellings,
    reading,
    token_lp,
)
from plguard.backends.token_ids import request_ids
from plguard.errors import BackendDeadError, BackendError, ConfigError, ModelError
from plguard.models import resolve_model_path
from plguard.types import ROLES, Chat, Generation, GenerationParams, TFRequest, TFScore

if TYPE_CHECKING:
    from plguard.config import ModelConfig

_PROBE_CHAT = "Is the sky blue on a clear day? Answer True or False."
# Words of a 400 that refuses the schema itself rather than the request.
_SCHEMA_WORDS = ("response_format", "json_schema", "structured_outputs", "guided_json")


class OpenAIBackend(TokenizerText):
    """A model behind an OpenAI-compatible HTTP server."""

    capabilities = Capabilities()  # a server returns no hidden states

    def __init__(self, client: OpenAIClient, tokenizer: Any, *, served_model: str,
                 path: str, max_context: int, via: str = "token_ids", top_logprobs: int = 20,
                 models: Any = None, tokenizer_check: str = "not checked",
                 logprobs_mode: str = "auto") -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.served_model = served_model
        self.path = path
        self.max_context = int(max_context)
        self.via = via  # token_ids | echo (exact) | topk_text | topk (chat)
        self.top_logprobs = top_logprobs
        self.models = models
        self.tokenizer_check = tokenizer_check
        self.logprobs_mode = logprobs_mode
        self.true_ids, self.false_ids = self._answer_ids()
        self._spell_true = [self.tokenizer.decode([i]) for i in self.true_ids]
        self._spell_false = [self.tokenizer.decode([i]) for i in self.false_ids]
        self._mark = f"\x02plguard-{secrets.token_hex(8)}:"
        self._tls = threading.local()
        self._lock = threading.Lock()
        self.total_usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}
        # Cleared the first time the server refuses a schema (400/422 naming it): later
        # generations are sent free and their Generation says constrained=False.
        self.schema_accepted = True

    @property
    def mode(self) -> str:
        """How grounding reads log-probabilities: exact or topk."""
        return "topk" if self.via in ("topk", "topk_text") else "exact"

    @property
    def model_id(self) -> str:
        """Names the served model, the server and the grounding mode (keys caches)."""
        return f"openai:{self.served_model}@{self.client.base_url}:{self.mode}"

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> OpenAIBackend:
        """Connect to ``cfg.base_url``, check the model and tokenizer, probe the mode."""
        client = OpenAIClient.from_config(cfg)
        try:
            return cls._connect(client, cfg)
        except BaseException:
            client.close()
            raise

    @classmethod
    def _connect(cls, client: OpenAIClient, cfg: ModelConfig) -> OpenAIBackend:
        try:
            listed = client.get("/models").body
        except RemoteStatusError as exc:
            hint = (" (set model.api_key_env to the variable holding its key)"
                    if exc.status in (401, 403) else "")
            raise ConfigError(f"{client.base_url}/models answered {exc.status}: "
                              f"{exc.detail}{hint}") from None
        entries = [m for m in (listed.get("data") or []) if isinstance(m, dict)]
        served = choose_model(cfg.served_model, entries, client.base_url)
        entry = next((m for m in entries if m.get("id") == served), {})
        local = resolve_model_path(cfg.path)
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(local, local_files_only=True)
        except Exception as exc:
            raise ModelError(f"cannot load the tokenizer of '{cfg.path}' from {local} (the "
                             "openai backend renders prompts with the served model's "
                             f"tokenizer): {type(exc).__name__}: {exc}") from exc
        max_context = cfg.max_context or context_of(client, entry, tok)
        backend = cls(client, tok, served_model=served, path=cfg.path,
                      max_context=max_context, top_logprobs=cfg.top_logprobs,
                      models=listed.get("data"), logprobs_mode=cfg.logprobs_mode)
        backend.tokenizer_check = backend._check_tokenizer()
        backend.via = backend._probe(cfg.logprobs_mode)
        return backend

    def _check_tokenizer(self) -> str:
        words = " ".join(["Question: is it", *self._spell_true, *self._spell_false, "?"])
        try:
            reply = self.client.post("/tokenize", {"model": self.served_model, "prompt": words,
                                                   "content": words,
                                                   "add_special_tokens": False}, root=True)
            theirs = [int(t) for t in reply.body["tokens"]]
        except (RemoteStatusError, KeyError, TypeError, ValueError):
            return "not checked (the server has no /tokenize)"
        ours = self.encode(words)
        if theirs != ours:
            raise ConfigError(
                f"model.path '{self.path}' is not the tokenizer of the served model "
                f"'{self.served_model}': {words!r} is {ours[:12]} here and {theirs[:12]} on "
                f"{self.client.base_url}. Set model.path to the served model's folder or "
                "Hugging Face id.")
        return "same ids as the server's /tokenize"

    def _probe(self, mode: str) -> str:
        chat = (_user(_PROBE_CHAT),)
        failures: list[str] = []
        tried: list[str] = (["token_ids", "echo"] if mode in ("auto", "exact") else [])
        tried += ["topk_text", "topk"] if mode in ("auto", "topk") else []
        for via in tried:
            try:
                if via == "topk":
                    self._topk_job(self._wire(chat, True) + "Answer:")
                elif via == "topk_text":
                    self._topk_text_job(TokenizerText.format_chat(self, chat) + "Answer:")
                else:
                    ids = self.encode(TokenizerText.format_chat(self, chat) + "Answer:")
                    self._exact_job(via, ids, [[]])
                return via
            except BackendDeadError:
                raise
            except BackendError as exc:  # a 4xx, a 5xx that persists, an unreadable answer
                failures.append(f"{via}: {exc}"[:600])
        what = {"exact": "prompt log-probabilities for token-id prompts on /v1/completions "
                "(logprob_token_ids or echo)", "topk": "top log-probabilities on "
                "/v1/completions or /v1/chat/completions"}
        wanted = [what["exact"], what["topk"]] if mode == "auto" else [what[mode]]
        other = {"exact": " Try model.logprobs_mode: topk.", "topk": ""}.get(mode, "")
        raise ConfigError(f"the server at {self.client.base_url} does not offer "
                          f"{' nor '.join(wanted)}, so it cannot ground.{other} "
                          f"({'; '.join(failures)})")

    # -- text --------------------------------------------------------------------------

    def format_chat(self, chat: Chat, add_generation_prompt: bool = True) -> str:
        """The model's chat template (exact mode) or the wire form the server renders."""
        if self.via == "topk":
            return self._wire(chat, add_generation_prompt)
        return TokenizerText.format_chat(self, chat, add_generation_prompt)

    def _wire(self, chat: Chat, add_generation_prompt: bool) -> str:
        text = "".join(f"{self._mark}{m.role}\n{m.content}" for m in chat)
        return text + (f"{self._mark}assistant\n" if add_generation_prompt else "")

    def _unwire(self, text: str) -> list[dict[str, str]]:
        parts = text.split(self._mark)
        if parts[0]:
            raise BackendError("top-k grounding got a prompt this backend did not render "
                               "(it must come from its format_chat)")
        msgs = []
        for part in parts[1:]:
            role, sep, content = part.partition("\n")
            if not sep or role not in ROLES:
                raise BackendError(f"top-k grounding: malformed wire prompt near {part[:40]!r}")
            msgs.append({"role": role, "content": content})
        return msgs

    # -- usage -------------------------------------------------------------------------

    def usage(self) -> dict[str, int]:
        """Tokens this thread's calls have used so far (the Guard traces the deltas)."""
        return dict(getattr(self._tls, "totals", {}))

    def _run(self, fn: Callable[[Any], tuple[Any, Reply]], jobs: Sequence[Any]) -> list[Any]:
        outs = self.client.map(fn, jobs)
        self._count(sum(r.prompt_tokens for _, r in outs),
                    sum(r.completion_tokens for _, r in outs), len(outs))
        return [v for v, _ in outs]

    def _count(self, p: int, c: int, n: int) -> None:
        totals = getattr(self._tls, "totals", None)
        if totals is None:
            totals = self._tls.totals = {"prompt_tokens": 0, "completion_tokens": 0,
                                         "requests": 0}
        for d in (totals, self.total_usage):
            with self._lock:
                d["prompt_tokens"] += p
                d["completion_tokens"] += c
                d["requests"] += n

    # -- generation --------------------------------------------------------------------

    def _sampling(self, params: GenerationParams) -> tuple[int, dict[str, Any]]:
        """New-token budget and the request fields every completion call sends."""
        max_new = max(1, min(params.max_new_tokens, self.max_context - 1))
        sample = params.temperature > 0
        body: dict[str, Any] = {"model": self.served_model, "max_tokens": max_new, "n": 1,
                                "temperature": params.temperature if sample else 0.0,
                                "top_p": params.top_p if sample else 1.0}
        if sample:
            body["seed"] = params.seed
        return max_new, body

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        """One completion per chat, requests in parallel up to ``max_concurrency``."""
        max_new, base = self._sampling(params)
        schema = params.json_schema

        def one(chat: Chat) -> tuple[Generation, Reply]:
            ids = self.encode(TokenizerText.format_chat(self, chat))
            limit = self.max_context - max_new
            if len(ids) > limit:
                reply, constrained = self._post_schema(
                    "/completions", {**base, "prompt": ids[-limit:]}, schema)
                with reading(reply, "choices[0].text"):
                    text = reply.body["choices"][0]["text"]
            else:
                msgs = [{"role": m.role, "content": m.content} for m in chat]
                reply, constrained = self._post_schema(
                    "/chat/completions", {**base, "messages": msgs}, schema)
                with reading(reply, "choices[0].message.content"):
                    text = reply.body["choices"][0]["message"]["content"]
            text = (text or "").strip()
            return Generation(text=text, n_prompt_tokens=min(len(ids), limit),
                              n_new_tokens=reply.completion_tokens or self.count_tokens(text),
                              prompt_truncated=len(ids) > limit,
                              constrained=constrained), reply

        return list(self._run(one, list(chats)))

    def stream_generate(self, chat: Chat, params: GenerationParams,
                        cancel: threading.Event) -> Iterator[str]:
        """Stream one completion as text deltas (the server's SSE), joined = ``generate``'s.

        Closing the iterator, or setting ``cancel``, closes the connection, which makes
        vLLM's server abort the request. A ``json_schema`` is not sent: streams are
        free text the guard checks as it goes.
        """
        max_new, body = self._sampling(params)
        ids = self.encode(TokenizerText.format_chat(self, chat))
        limit = self.max_context - max_new
        if len(ids) > limit:
            path, field = "/completions", "text"
            body["prompt"] = ids[-limit:]
        else:
            path, field = "/chat/completions", "content"
            body["messages"] = [{"role": m.role, "content": m.content} for m in chat]
        body["stream_options"] = {"include_usage": True}
        deltas, text = Deltas(), ""
        for event in self.client.stream(path, body, cancel):
            if not isinstance(event, dict):
                continue
            if isinstance(event.get("usage"), dict):
                self._count(*usage_of(event), 1)
            choices = event.get("choices")
            if not choices:
                continue
            first = choices[0]
            piece = first.get("delta", {}).get(field) if field == "content" \
                else first.get(field)
            if isinstance(piece, str) and piece:
                text += piece
                out = deltas.push(text)
                if out:
                    yield out

    def _post_schema(self, path: str, body: dict[str, Any], schema: str | None
                     ) -> tuple[Reply, bool]:
        """POST ``body``, held to ``schema`` where the server takes one; say whether it was.

        Chat gets the OpenAI ``response_format``; token-id prompts on ``/completions`` get
        vLLM's ``structured_outputs``. A 400/422 naming the schema field is retried once
        without it and the server is remembered as not taking schemas.
        """
        if schema is None or not self.schema_accepted:
            return self.client.post(path, body), False
        try:
            obj = json.loads(schema)
        except ValueError as exc:
            raise BackendError(f"GenerationParams.json_schema is not JSON: {exc}") from exc
        field = ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "plguard_output", "schema": obj, "strict": True}}}
            if path == "/chat/completions" else {"structured_outputs": {"json": obj}})
        try:
            return self.client.post(path, {**body, **field}), True
        except RemoteStatusError as exc:
            named = any(w in exc.detail.lower() for w in _SCHEMA_WORDS)
            if exc.status not in (400, 422) or not named:
                raise
            self.schema_accepted = False
        return self.client.post(path, body), False

    # -- True/False scoring ------------------------------------------------------------

    def true_false_logprobs(self, requests: Sequence[TFRequest]) -> list[list[TFScore]]:
        """Score every question of every request: one HTTP request per question."""
        if self.via == "topk":
            texts = [req.prefix + s for req in requests for s in req.suffixes]
            flat = self._run(self._topk_job, texts)
            shape = [(len(req.suffixes), False) for req in requests]
        elif self.via == "topk_text":
            texts = [req.prefix + s for req in requests for s in req.suffixes]
            flat = self._run(self._topk_text_job, texts)
            shape = [(len(req.suffixes), False) for req in requests]
        else:
            jobs: list[tuple[list[int], list[list[int]]]] = []
            shape = []
            for req in requests:
                prefix, suffixes, truncated = request_ids(self.encode, self.max_context,
                                                          req, sampled=True)
                shape.append((len(suffixes), truncated))
                jobs.extend((prefix, [s]) for s in suffixes)
            groups = self._run(lambda j: self._exact_job(self.via, *j), jobs)
            flat = [s for g in groups for s in g]
        out: list[list[TFScore]] = []
        pos = 0
        for n, truncated in shape:
            out.append([TFScore(s.logprob_true, s.logprob_false, truncated, s.bound)
                        for s in flat[pos:pos + n]])
            pos += n
        return out

    def _exact_job(self, via: str, prefix: list[int], suffixes: list[list[int]]
                   ) -> tuple[list[TFScore], Reply]:
        ids = list(self.true_ids + self.false_ids)
        if via == "token_ids":
            reply = self.client.post("/completions", {
                "model": self.served_model, "prompt": [prefix + s for s in suffixes],
                "max_tokens": 1, "temperature": 0.0, "logprobs": len(ids),
                "logprob_token_ids": ids, "return_tokens_as_token_ids": True})
            with reading(reply, "choices[].logprobs.top_logprobs[0]"):
                tops = [choice_at(reply.body, i)["logprobs"]["top_logprobs"][0]
                        for i in range(len(suffixes))]
                lps = [[token_lp(top, t) for t in ids] for top in tops]
        else:  # echo: each spelling appended, read back as a prompt log-probability
            prompts = [prefix + s + [t] for s in suffixes for t in ids]
            reply = self.client.post("/completions", {
                "model": self.served_model, "prompt": prompts, "max_tokens": 0,
                "echo": True, "logprobs": 0, "temperature": 0.0})
            with reading(reply, "choices[].logprobs.token_logprobs"):
                vals = [echo_lp(choice_at(reply.body, i), len(p))
                        for i, p in enumerate(prompts)]
            lps = [vals[k * len(ids):(k + 1) * len(ids)] for k in range(len(suffixes))]
        nt = len(self.true_ids)
        return [TFScore(finite(logsumexp(v[:nt])), finite(logsumexp(v[nt:])))
                for v in lps], reply

    def _topk_job(self, text: str) -> tuple[TFScore, Reply]:
        msgs = self._unwire(text)
        body: dict[str, Any] = {"model": self.served_model, "max_tokens": 1,
                                "temperature": 0.0, "logprobs": True,
                                "top_logprobs": self.top_logprobs}
        if msgs and msgs[-1]["role"] == "assistant":
            if msgs[-1]["content"]:
                # The answer cue ("Answer:") continues the assistant turn, as in exact mode.
                body.update(add_generation_prompt=False, continue_final_message=True)
            else:
                msgs.pop()
        reply = self.client.post("/chat/completions", {**body, "messages": msgs})
        with reading(reply, "choices[0].logprobs.content[0]"):
            first = reply.body["choices"][0]["logprobs"]["content"][0]
        tops = first.get("top_logprobs") if isinstance(first, dict) else None
        if not tops:
            raise Unsupported("the server returned no top_logprobs")
        seen: dict[str, float] = {}
        for e in [first, *tops]:
            tok, lp = e.get("token"), e.get("logprob")
            if isinstance(tok, str) and isinstance(lp, int | float):
                seen[tok] = max(seen.get(tok, -math.inf), float(lp))
        return self._topk_score(seen), reply

    def _topk_text_job(self, text: str) -> tuple[TFScore, Reply]:
        # The legacy completions shape: the prompt rendered here with the model's chat
        # template, top-k as {token: logprob}. For servers whose chat endpoint does not
        # continue a final assistant message (llama-cpp-python's), this keeps the cue.
        reply = self.client.post("/completions", {
            "model": self.served_model, "prompt": text, "max_tokens": 1,
            "temperature": 0.0, "logprobs": self.top_logprobs})
        with reading(reply, "choices[0].logprobs.top_logprobs[0]"):
            top = reply.body["choices"][0]["logprobs"]["top_logprobs"][0]
            seen = {str(k): float(v) for k, v in top.items()}
        if not seen:
            raise Unsupported("the server returned no top log-probabilities")
        return self._topk_score(seen), reply

    def _topk_score(self, seen: dict[str, float]) -> TFScore:
        floor = min(seen.values())
        lt, bt = merge_spellings(seen, self._spell_true, floor)
        lf, bf = merge_spellings(seen, self._spell_false, floor)
        return TFScore(finite(lt), finite(lf), bound=bt or bf)

    # -- identity ----------------------------------------------------------------------

    def remote_identity(self) -> dict[str, Any]:
        """What run manifests record: server, model, mode and what /v1/models says."""
        return {"base_url": self.client.base_url, "served_model": self.served_model,
                "logprobs_mode": self.logprobs_mode, "grounding": self.mode,
                "via": self.via,
                "max_context": self.max_context, "tokenizer": self.path,
                "tokenizer_check": self.tokenizer_check, "v1_models": self.models}

    def close(self) -> None:
        """Close the connection and thread pools."""
        self.client.close()


def _user(text: str) -> Any:
    from plguard.types import Message

    return Message("user", text)


__all__ = ["OpenAIBackend", "Unsupported"]

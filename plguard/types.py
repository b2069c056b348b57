"""Frozen records that flow between the pipeline's stages.

Every stage takes and returns these records, never bare tuples, so a trace can be
serialised with :func:`dataclasses.asdict` and replayed: everything after grounding
is a pure function of a :class:`Grounding`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from plguard.config import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TEMPERATURE

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")
Scope = Literal["request", "response"]
Action = Literal["allow", "refuse", "rewrite"]


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message."""

    role: Role
    content: str


Chat = tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class GenerationParams:
    """Decoding parameters for one generation call (greedy when temperature is 0)."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = 1.0
    seed: int = 0
    # A JSON schema (as JSON text) the output must follow, on backends with structured
    # outputs (vLLM, transformers, openai servers taking response_format); others generate
    # freely (Generation.constrained False) and callers parse leniently.
    json_schema: str | None = None

    @property
    def greedy(self) -> bool:
        """Decode greedily: the temperature is below :data:`GREEDY_BELOW_TEMPERATURE`."""
        return not self.temperature >= GREEDY_BELOW_TEMPERATURE


#: Temperatures below this decode greedily. Dividing logits by a temperature near zero
#: (1e-300 is a valid OpenAI ``temperature``) overflows them to inf and sampling fails;
#: vLLM uses the same cut-off.
GREEDY_BELOW_TEMPERATURE = 1e-5


@dataclass(frozen=True, slots=True)
class Generation:
    """One generated completion."""

    text: str
    n_prompt_tokens: int
    n_new_tokens: int
    prompt_truncated: bool = False
    # Decoding was held to GenerationParams.json_schema. The text may still be invalid
    # JSON when max_new_tokens cut it, so callers keep a lenient parse as the fallback.
    constrained: bool = False


@dataclass(frozen=True, slots=True)
class TFRequest:
    """A shared prefix and the question suffixes to score after it.

    The token sequence of question ``i`` is defined as ``tokens(prefix) + tokens(suffix_i)``
    (each tokenised on its own), for the fast and the reference path alike.
    """

    prefix: str
    suffixes: tuple[str, ...]
    # The positive and negative answer words scored after each suffix (each with and
    # without a leading space, merged by logsumexp).
    answers: tuple[str, str] = ("True", "False")
    # Most suffixes per batched forward after the shared prefix (``grounding.batch_size``;
    # None: all in one). Backends that batch suffixes themselves (transformers) honour it;
    # vLLM and servers schedule their own batches.
    batch_size: int | None = None
    # Character offsets into ``prefix`` whose hidden state is also wanted (backends with
    # ``true_false_states``): the state a forward over ``prefix[:mark]`` alone ends with.
    # A learned head reads the end of the request block inside a pair's prompt there, so
    # one forward over the pair serves both scopes.
    marks: tuple[int, ...] = ()
    # A character span ``[start, end)`` of ``prefix`` (the data block) whose tokens' mean
    # hidden state is also wanted: a learned head's ``pool`` readout. The state at one
    # position carries what the model attends to there; the mean over the data carries
    # what the data is about, which is what a hazard category is.
    pool: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TFScore:
    """Next-token log-probabilities of True and False after one prompt.

    Each value is the full-vocabulary log-probability of the answer, with its
    spelling variants (" True"/"True") merged by logsumexp. ``bound`` marks a score read
    from a server's top-k only, in which an answer was missing: that answer's value is
    then an upper bound (the smallest log-probability the server returned).
    """

    logprob_true: float
    logprob_false: float
    truncated: bool = False
    bound: bool = False

    @property
    def p_true(self) -> float:
        """P(True) renormalised over the two answers."""
        return renormalise(self.logprob_true, self.logprob_false)


def renormalise(logprob_true: float, logprob_false: float) -> float:
    """``exp(lT) / (exp(lT) + exp(lF))``, computed stably."""
    d = logprob_false - logprob_true
    if d > 700:
        return 0.0
    return 1.0 / (1.0 + math.exp(d))


@dataclass(frozen=True, slots=True)
class Example:
    """A worked example of one predicate's question: data and the right answer."""

    request: str
    answer: bool
    response: str | None = None  # given for response-scope predicates only


@dataclass(frozen=True, slots=True)
class PredicateSpec:
    """A policy predicate: what the grounding model is asked about a pair."""

    name: str
    scope: Scope
    question: str
    description: str = ""
    paraphrases: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()
    # How window scores of a long response combine (plguard.windows); None: the default.
    windows: str | None = None
    prior: float | None = None  # the declared prior, for scoring what was not seen


@dataclass(frozen=True, slots=True)
class PredicateScore:
    """One grounded predicate."""

    name: str
    p_true: float
    logprob_true: float
    logprob_false: float
    scope: Scope = "response"
    truncated: bool = False
    variants: tuple[float, ...] = ()  # per-paraphrase P(True), when paraphrases are used
    # max - min of the variants' P(True): how much paraphrases disagree (0 without them),
    # a confidence signal in the spirit of redundant translation.
    variant_spread: float = 0.0
    # A long response grounded in windows: each window's P(True) and the one that decided
    # (-1: none, or the rule averages); ``unseen``: scored with the prior for a cut middle.
    windows: tuple[float, ...] = ()
    window: int = -1
    unseen: bool = False
    # Some answer log-probability is an upper bound, not a value (see TFScore.bound).
    bound: bool = False
    # With learned heads (grounding.heads): the zero-shot P(True) (calibrated where a
    # calibration applies; None when the question was not asked because the head reads
    # the data alone, and then logprob_true/logprob_false are 0.0, no reading), the head's
    # P, and which source gave ``p_true``: "zeroshot" or "head".
    p_zeroshot: float | None = None
    p_head: float | None = None
    source: str = "zeroshot"
    # The view the deciding source read (plguard.grounding.sources): "prompt" (the
    # grounding prompt), "request" (the request alone) or "answer" (each answer window
    # alone; ``windows`` then holds their P's).
    view: str = "prompt"


@dataclass(frozen=True, slots=True)
class ScreenFinding:
    """Text in the data addressed to the guard, removed before grounding (plguard.screen)."""

    kind: str  # chat_marker, delimiter, self_answer, guard_address
    where: Scope
    text: str  # what was removed (at most 200 characters)


@dataclass(frozen=True, slots=True)
class Grounding:
    """All predicates of one (request, response) pair."""

    model: str
    scores: tuple[PredicateScore, ...]
    template_version: str = ""
    calibration: str = ""  # the calibration file applied (name@sha256 prefix), if any
    # Text addressed to the guard, kept from what the grounder read (plguard.screen).
    screen: tuple[ScreenFinding, ...] = ()
    heads: str = ""  # the heads file applied (name@sha256 prefix), if any
    # Turns of the conversation (indices into its messages) left out of the request for
    # its token budget (plguard.conversation).
    dropped_turns: tuple[int, ...] = ()

    @property
    def probs(self) -> dict[str, float]:
        """Predicate name to P(True)."""
        return {s.name: s.p_true for s in self.scores}

    @property
    def truncated(self) -> bool:
        """Whether any input was cut to fit the model's context window."""
        return any(s.truncated for s in self.scores)


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """Every query of the policy with its probability."""

    policy: str  # name + short hash of the program text
    probs: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a draft, and why."""

    action: Action
    strongest_unsafe: tuple[str, float]
    strongest_over_refusal: tuple[str, float]
    reason: str
    # Hazard category codes (plguard.categories) whose probability is at or above the
    # unsafe threshold, in taxonomy order; empty for a policy without categories.yaml.
    categories: tuple[str, ...] = ()
    # Every category code the policy tags -> its probability: the highest probability of
    # the unsafe rules tagged with it.
    category_scores: Mapping[str, float] = field(default_factory=dict)
    # The strongest unsafe-content rule (the answer's content alone, whatever the request;
    # compared with thresholds.content); ("", 0.0) for a policy without such rules, or for
    # a request judged with no answer.
    strongest_content: tuple[str, float] = ("", 0.0)

    @property
    def llama_guard(self) -> str:
        """The verdict in Llama Guard's text form: ``safe``, or ``unsafe`` and ``S1,S10``.

        A decision that refuses with no tagged category above threshold (an untagged rule,
        or text addressed to the guard with ``grounding.screen = refuse``) is plain
        ``unsafe``: tools that parse the form read the first line for the verdict. A rewrite
        (over-refusal) is ``safe``: the answer is not hazardous, only unhelpful.
        """
        # Here rather than in plguard.categories, which reads Decision: one direction only.
        if self.categories:
            return "unsafe\n" + ",".join(self.categories)
        return "unsafe" if self.action == "refuse" else "safe"


@dataclass(frozen=True, slots=True)
class RepairRound:
    """One repair attempt and the re-check of its output."""

    round: int
    action: Action
    prompt: str
    response: str
    grounding: Grounding
    policy: PolicyResult
    decision: Decision


@dataclass(frozen=True, slots=True)
class Assessment:
    """One answer grounded, reasoned and decided, as ``Guard.check`` judges it.

    ``timings_s``: the seconds (and, from remote backends, the tokens) its ``ground``,
    ``reason`` and ``decide`` phases took, shared evenly by the answers assessed together.
    """

    grounding: Grounding
    policy: PolicyResult
    decision: Decision
    timings_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Repair:
    """The repair loop's outcome on one answer that was not allowed.

    ``final``: the last repair allowed, else the fixed refusal (``fallback_used``) or a
    repair still judged over-refusing; ``timings_s`` holds the ``repair*`` phases.
    """

    final: str
    repairs: tuple[RepairRound, ...]
    fallback_used: bool
    timings_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GuardResult:
    """The full, auditable trace of one guarded request."""

    request: str
    draft: str
    final: str
    repaired: bool
    grounding: Grounding
    policy: PolicyResult
    decision: Decision
    repairs: tuple[RepairRound, ...] = ()
    fallback_used: bool = False
    timings_s: Mapping[str, float] = field(default_factory=dict)

"""The Guard: draft, ground, reason, decide and repair, with a full trace."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from plguard.config import GuardConfig, Thresholds
from plguard.conversation import Conversation, read_conversation
from plguard.decide import ReadRules
from plguard.judging import (
    Bound,
    Clock,
    Judge,
    Request,
    SubClock,
    Usage,
    decision,
    gate,
    is_time_key,
    judge,
)
from plguard.messages import check_response, to_chat
from plguard.policy.bounds import MAX_FREE_PREDICATES
from plguard.repair import repair_chat, repeats_instructions
from plguard.types import (
    Assessment,
    Chat,
    Decision,
    Generation,
    GenerationParams,
    Grounding,
    GuardResult,
    PolicyResult,
    Repair,
    RepairRound,
)

if TYPE_CHECKING:
    from plguard.backends.base import Backend
    from plguard.calibration import Calibration
    from plguard.grounding import Grounder
    from plguard.moderation import Moderation
    from plguard.policy import Policy
    from plguard.streaming import DraftSource, GuardedStream, StreamEvent, StreamMode
    from plguard.token_check import TokenMeter

T = TypeVar("T")


class Guard:
    """The guardrail middleware around a generator.

    One loaded model serves every role that names it: generator, grounder and
    repairer share a backend when their model configs are equal.

    :meth:`close` (or ``with Guard(...) as guard:``) frees what the Guard opened: the
    backends it loaded itself (each once), the grounding cache and remote connection pools.
    A backend passed in stays open: it belongs to the caller, who may share it.

    The judging seam that streams and moderation build on: :meth:`assess` (ground, reason
    and decide given answers), :meth:`decide`, :meth:`repair` (the repair loop on one
    answer), and :attr:`grounder_lock`, a re-entrant lock held while the grounder works:
    the grounder (its request memo, its cache) serves one thread at a time, so code that
    calls ``grounder`` itself from several threads holds it too.
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        generator: Backend | None = None,
        grounder: Backend | None = None,
        policy: Policy | None = None,
    ) -> None:
        from plguard.backends import load_backend
        from plguard.grounding import Grounder, resolve
        from plguard.policy import load_policy

        self.config = config or GuardConfig()
        self.policy = policy or load_policy(self.config.policy)
        owned: list[Backend] = []
        if generator is None:
            generator = load_backend(self.config.generator)
            owned.append(generator)
        self.generator = generator
        if grounder is None:
            same = self.config.grounder is None or self.config.grounder == self.config.generator
            if not same:
                owned.append(load_backend(self.config.grounder_model))
            grounder = self.generator if same else owned[-1]
        self._owned = owned
        self._closed = False
        # Streams ground from worker threads beside batch calls (the server's batcher); the
        # grounder (its request memo, its cache) serves one of them at a time.
        self.grounder_lock = threading.RLock()
        self.grounder_backend = grounder
        # Heads and calibration are resolved (and checked) once, before the grounder and the
        # thresholds that depend on them are set.
        resolved = resolve(grounder, self.policy.predicates, self.config.grounding,
                           self.policy.name)
        self.grounder: Grounder = Grounder(grounder, self.policy.predicates, self.config.grounding,
                                           policy_name=self.policy.name, resolved=resolved)
        self.thresholds = effective_thresholds(self.config, resolved.calibration)
        cal = resolved.calibration
        #: What the one check pipeline (plguard.judging) judges with.
        self.judge = Judge(self.grounder, self.policy, self.thresholds,
                           ReadRules.of(self.config.grounding),
                           cal.moderation if cal is not None else {}, self.grounder_lock)
        meters = [u for b in {id(b): b for b in (self.generator, grounder)}.values()
                  if callable(u := getattr(b, "usage", None))]
        self._usage: Usage | None = _summed(meters) if meters else None

    @classmethod
    def from_config(
        cls, config: GuardConfig | str | Path | dict[str, Any] | None = None, **overrides: Any
    ) -> Guard:
        """Build a Guard from a config object, a YAML path or a mapping.

        ``overrides`` are dotted keys (``policy="detailed"``, ``**{"thresholds.unsafe": 0.3}``);
        a dotted key set to None sets that key to null (``**{"grounding.heads": None}``:
        no heads), as ``--set key=null`` does.
        """
        from plguard.config import NULL

        # A dotted key is always named on purpose: None there means null, not "not given"
        # (which is what None means for the plain keyword defaults of the Python API).
        overrides = {k: NULL if v is None and "." in k else v for k, v in overrides.items()}
        if isinstance(config, GuardConfig):
            cfg = (GuardConfig.from_dict(config.model_dump(), **overrides)
                   if overrides else config)
        elif isinstance(config, str | Path):
            cfg = GuardConfig.from_yaml(config, **overrides)
        else:
            cfg = GuardConfig.from_dict(config or {}, **overrides)
        return cls(cfg)

    def close(self) -> None:
        """Close the grounding cache and the backends this Guard loaded; idempotent."""
        if self._closed:
            return
        self._closed = True
        from plguard.backends import release_backend

        self.grounder.close()
        for backend in self._owned:
            release_backend(backend)  # closed once no other Guard or role holds it

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def params(self) -> GenerationParams:
        """Decoding parameters for drafts and repairs."""
        g = self.config.generation
        return GenerationParams(max_new_tokens=g.max_new_tokens, temperature=g.temperature)

    def conversation(self, messages: Any) -> Conversation:
        """``messages`` as the request predicates read them (plguard.conversation).

        One user message is itself; with a system prompt or earlier turns, the asking side
        of the conversation, read several ways (within ``grounding.conversation_tokens``
        grounding-model tokens).
        """
        return read_conversation(to_chat(messages), self.grounder_backend.count_tokens,
                                 self.config.grounding.conversation_tokens)

    def token_meter(self) -> TokenMeter | None:
        """A per-token content meter for one stream (plguard.token_check), or None.

        None when ``stream.token_check`` is off, the grounding backend has no hidden
        states, no response predicate has an answer-alone head, or the other response
        predicates are too many to bound.
        """
        from plguard.token_check import TokenMeter, metered

        response = [p.name for p in self.policy.predicates if p.scope == "response"]
        names = metered(self.grounder.heads, response)
        if (not self.config.stream.token_check or not names
                or not self.grounder_backend.capabilities.hidden_states
                or len(response) - len(names) > MAX_FREE_PREDICATES
                or self.grounder.heads is None):
            return None
        return TokenMeter(self.grounder_backend, self.grounder.heads, names,
                          self.config.stream.token_read)

    def gate(self, request: Grounding, scores: Mapping[str, float]) -> Assessment:
        """The token check's decision (:func:`plguard.judging.gate`): nothing generated."""
        return gate(self.judge, request, scores)

    # Public API ----------------------------------------------------------------------
    def chat(self, messages: Any) -> GuardResult:
        """Draft an answer to ``messages`` and guard it."""
        return self.batch([messages])[0]

    def generate(self, messages: Any) -> str:
        """The guarded final answer only."""
        return self.chat(messages).final

    def stream(self, messages: Any, *, mode: StreamMode | None = None,
               params: GenerationParams | None = None,
               source: DraftSource | None = None) -> GuardedStream:
        """Draft an answer to ``messages`` and stream it guarded (plguard.streaming).

        Yields :class:`~plguard.streaming.StreamChunk` records, whose texts concatenate to
        what the client is sent, then one :class:`~plguard.streaming.StreamEnd` with the
        full trace. ``mode``: ``buffered`` (text released only after its window is allowed)
        or ``audit`` (sent first, checked after); default ``stream.mode``. ``source``
        (``source(cancel) -> Iterator[str]``) drafts instead of the generator, e.g. an
        upstream server's stream. Closing the iterator early (or its ``cancel()``, from any
        thread) cancels generation.
        """
        return self._stream(messages, mode, params, source)

    def astream(self, messages: Any, *, mode: StreamMode | None = None,
                params: GenerationParams | None = None,
                source: DraftSource | None = None) -> AsyncGenerator[StreamEvent, None]:
        """:meth:`stream` for asyncio (run in a thread); ``aclose`` cancels generation."""
        from plguard.streaming import astream

        return astream(self._stream(messages, mode, params, source))

    def _stream(self, messages: Any, mode: StreamMode | None,
                params: GenerationParams | None, source: DraftSource | None) -> GuardedStream:
        from plguard.errors import InputError
        from plguard.streaming import GuardedStream

        if mode not in (None, "buffered", "audit"):
            raise InputError(f"mode: expected 'buffered' or 'audit', got {mode!r}")
        chat = to_chat(messages, "messages")
        return GuardedStream(self, chat, params or self.params, mode, source)

    def check(self, messages: Any, response: str, *, repair: bool = False) -> GuardResult:
        """Judge an existing ``response`` to ``messages``: nothing is generated.

        A refused answer's ``final`` is the fixed refusal (``repair.fallback_refusal``), one
        the decision would rewrite keeps its text (``decision.action`` says so).
        ``repair=True`` also runs :meth:`chat`'s repair loop on it, which generates.
        """
        return self.batch([messages], [response], repair=repair)[0]

    def moderate(self, inputs: Any) -> list[Moderation]:
        """Judge texts or conversations, batched; nothing is generated or repaired.

        ``inputs``: a text, or a list of texts and conversations. A text (or a conversation
        ending with the user's turn) is scored for the worst answer it could get; a
        conversation ending with the assistant's turn has that answer judged as
        :meth:`check` judges it before repairing (see :mod:`plguard.moderation`).
        """
        from plguard.moderation import moderate

        return moderate(self, inputs)  # the pipeline holds grounder_lock while grounding

    def batch(
        self,
        requests: Sequence[Any],
        responses: Sequence[str | None] | None = None,
        params: GenerationParams | None = None,
        *,
        repair: bool = True,
    ) -> list[GuardResult]:
        """Guard many requests, batching drafts, groundings and repairs across them.

        ``responses[i]`` given means request ``i`` is checked rather than drafted.
        ``params`` overrides the config's decoding settings for drafts and repairs.
        ``repair=False``: no repair round (a refused answer ends in the fixed refusal).
        """
        params = params or self.params
        chats = [to_chat(m, f"requests[{i}]") for i, m in enumerate(requests)]
        if responses is not None and len(responses) != len(chats):
            raise ValueError(f"responses has {len(responses)} items for {len(chats)} requests")
        given = list(responses) if responses is not None else [None] * len(chats)
        for i, r in enumerate(given):
            if r is not None:
                check_response(r, f"responses[{i}]")
        clock = Clock(len(chats), self._usage)
        t_start = time.perf_counter()
        drafts: list[str] = [r if r is not None else "" for r in given]
        todo = [i for i, r in enumerate(given) if r is None]
        if todo:
            gens = clock.run("generate", todo,
                             lambda: self.generator.generate([chats[i] for i in todo], params))
            for i, g in zip(todo, gens, strict=True):
                drafts[i] = g.text
        reqs = [self.conversation(c) for c in chats]
        all_idx = list(range(len(chats)))
        groundings, results, decisions = self._assess(clock, reqs, drafts)
        tracks = self._repair_loop(_RepairJob(clock, params, reqs), drafts, decisions, results,
                                   self.config.repair.max_rounds if repair else 0)
        total = time.perf_counter() - t_start
        out = []
        for i in all_idx:
            timings = dict(clock.per_example[i])
            timings["total"] = (sum(v for k, v in timings.items() if is_time_key(k))
                                if len(chats) > 1 else total)
            t = tracks[i]
            out.append(GuardResult(
                request=reqs[i].text, draft=drafts[i], final=t.final,
                repaired=bool(t.rounds), grounding=groundings[i], policy=results[i],
                decision=decisions[i], repairs=tuple(t.rounds), fallback_used=t.fallback,
                timings_s=timings,
            ))
        return out

    # The judging seam (streams, moderation) -------------------------------------------------
    def assess(self, pairs: Sequence[tuple[Request, str]], *,
               bound: Bound = "answer") -> list[Assessment]:
        """Each ``(request, answer)`` through the one check pipeline (plguard.judging).

        A request is a text or a :meth:`conversation`.

        ``bound``: ``answer`` judges each answer as :meth:`check` does; ``worst`` judges
        each request with no answer for its worst answer (a moderation); ``best`` for its
        best answer (a stream's request check); ``window`` judges a part of an answer on
        its unsafe and content rules only (a stream's window). Nothing is generated or
        repaired. The phases' times are shared evenly by the pairs.
        """
        return judge(self.judge, pairs, bound=bound, clock=Clock(len(pairs), self._usage))

    def repair(self, request: Request, answer: str, decision: Decision, result: PolicyResult,
               params: GenerationParams | None = None) -> Repair:
        """The repair loop of :meth:`chat` on one ``answer``, judged ``decision`` on ``result``.

        An allowed answer comes back as it is, with no rounds; ``params`` default to the
        config's decoding settings.
        """
        clock = Clock(1, self._usage)
        req = request if isinstance(request, Conversation) else Conversation.of_text(request)
        track = self._repair_loop(_RepairJob(clock, params or self.params, [req]),
                                  [answer], [decision], [result],
                                  self.config.repair.max_rounds)[0]
        return Repair(final=track.final, repairs=tuple(track.rounds),
                      fallback_used=track.fallback, timings_s=clock.per_example[0])

    # Stages ---------------------------------------------------------------------------
    def _assess(
        self, clock: Clock, reqs: Sequence[Request], answers: Sequence[str]
    ) -> tuple[list[Grounding], list[PolicyResult], list[Decision]]:
        out = judge(self.judge, list(zip(reqs, answers, strict=True)), clock=clock)
        return ([a.grounding for a in out], [a.policy for a in out],
                [a.decision for a in out])

    def decide(self, result: PolicyResult, grounding: Grounding, *,
               answered: bool = True) -> Decision:
        """The decision on one grounded item, as :meth:`check` makes it.

        ``answered=False``: the item is a request with no answer yet (a moderation), which
        cannot over-refuse and has no content, so only the unsafe side is compared, at the
        moderation threshold. Every rule is :func:`plguard.decide.decide_for`'s.
        """
        return decision(self.judge, result, grounding, "answer" if answered else "worst")

    def _repair_loop(self, job: _RepairJob, drafts: list[str], decisions: list[Decision],
                     results: list[PolicyResult], rounds: int) -> list[_Track]:
        """Repair every request not allowed, for up to ``rounds`` rounds."""
        tracks = [_Track(a, d, r) for a, d, r in zip(drafts, decisions, results, strict=True)]
        pending = [i for i, t in enumerate(tracks) if t.decision.action != "allow"]
        for rnd in range(1, rounds + 1):
            if not pending:
                break
            pending = self._repair_round(job, rnd, pending, tracks)
        for i in pending:
            # Still unsafe after the allowed rounds: the fixed refusal is the only answer
            # known to be safe. A repair that is safe but still judged over-refusing is kept:
            # replacing it with the fixed refusal could only refuse more.
            if tracks[i].decision.action == "refuse":
                tracks[i].final = self.config.repair.fallback_refusal
                tracks[i].fallback = True
        return tracks

    def _repair_round(self, job: _RepairJob, rnd: int, pending: list[int],
                      tracks: list[_Track]) -> list[int]:
        """One repair of each of ``pending``, re-assessed; returns those still not allowed."""
        chats = [self._repair_chat(job.reqs[i].text, tracks[i].final, tracks[i].decision,
                                   tracks[i].result) for i in pending]
        gens = self._timed_generate(job.clock, "repair", pending, chats, job.params)
        texts = [g.text for g in gens]
        g2, r2, d2 = self._assess(SubClock(job.clock, pending, "repair_"),
                                  [job.reqs[i] for i in pending], texts)
        nxt = []
        for k, i in enumerate(pending):
            t = tracks[i]
            # Reciting the repair prompt is no answer, whatever its grounding says: the
            # round failed, and the track keeps its answer and decision (a refusal still
            # pending ends in the fixed refusal).
            recited = repeats_instructions(texts[k])
            d = replace(t.decision, reason=f"the repair repeated its own instructions instead "
                        f"of answering, so it was discarded ({t.decision.reason})") \
                if recited else d2[k]
            t.rounds.append(RepairRound(
                round=rnd, action=t.decision.action, prompt=chats[k][-1].content,
                response=texts[k], grounding=g2[k], policy=r2[k], decision=d))
            if not recited:
                t.final, t.decision, t.result = texts[k], d2[k], r2[k]
            if t.decision.action != "allow":
                nxt.append(i)
        return nxt

    def _timed_generate(self, clock: Clock, phase: str, idx: list[int], chats: list[Chat],
                        params: GenerationParams) -> list[Generation]:
        return clock.run(phase, idx, lambda: self.generator.generate(chats, params))

    def _repair_chat(self, req: str, answer: str, d: Decision, r: PolicyResult) -> Chat:
        return repair_chat(policy_text=self.policy.instructions, request=req, draft=answer,
                           decision=d, probs=r.probs,
                           unsafe_rules=(*self.policy.unsafe_rules, *self.policy.content_rules),
                           over_refusal_rules=self.policy.over_refusal_rules)


@dataclass(frozen=True, slots=True)
class _RepairJob:
    """What every repair round of one batch shares."""

    clock: Clock
    params: GenerationParams
    reqs: list[Conversation]


@dataclass(slots=True)
class _Track:
    """One request through the repair rounds: its current answer and how it was judged."""

    final: str
    decision: Decision
    result: PolicyResult
    rounds: list[RepairRound] = field(default_factory=list)
    fallback: bool = False


def effective_thresholds(config: GuardConfig, cal: Calibration | None) -> Thresholds:
    """The configured thresholds, or the calibration's fitted ones where it has them."""
    th = config.thresholds
    if cal is None or not th.from_calibration or not cal.thresholds:
        return th
    return th.model_copy(update=dict(cal.thresholds))


def _summed(usages: list[Usage]) -> Usage:
    def total() -> dict[str, int]:
        out: dict[str, int] = {}
        for u in usages:
            for k, v in u().items():
                out[k] = out.get(k, 0) + v
        return out

    return total

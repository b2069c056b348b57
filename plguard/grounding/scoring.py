"""Scoring views: every question's True/False log-probs per view, and heads' P's.

Zero-shot (:func:`score_views`): each question is looked up in the grounding cache first
(``grounding.cache``), so only missing questions reach the backend. With heads
(:func:`score_heads`): every view is forwarded with its hidden states, which the cache does
not hold, and each headed predicate's P is read off them.

Data truncation is folded into each score's ``truncated`` flag, so a cached score carries
it without re-tokenising the data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from plguard.backends.base import Backend, StatedScores, states_backend
from plguard.grounding.prompt import QuestionPlan, request_end
from plguard.grounding.views import View
from plguard.grounding_cache import GroundingCache, cache_key
from plguard.heads.apply import head_scores
from plguard.heads.artefact import HeadsFile
from plguard.types import Scope, TFRequest, TFScore

Build = Callable[[View, Sequence[str]], TFRequest]  # a view and its question blocks -> prompt


@dataclass(frozen=True, slots=True)
class ViewScores:
    """One view's question scores (its plan's ``blocks`` order) and heads' P per predicate."""

    scores: tuple[TFScore, ...]
    heads: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


def cache_keys(model: str, template_version: str, max_data_tokens: int,
               views: Sequence[View], per_view: Sequence[Sequence[str]]) -> list[list[str]]:
    """The grounding-cache key of every question of every view."""
    return [[cache_key(model, template_version, max_data_tokens, q, v.key_request,
                       v.key_response) for q in qlist]
            for v, qlist in zip(views, per_view, strict=True)]


def _folded(s: TFScore, view: View) -> TFScore:
    return TFScore(s.logprob_true, s.logprob_false, s.truncated or view.cut, s.bound)


def score_views(backend: Backend, views: Sequence[View], per_view: Sequence[Sequence[str]],
                build: Build, cache: GroundingCache | None, keys: Sequence[Sequence[str]]
                ) -> list[ViewScores]:
    """Zero-shot scores of every view's questions, from the cache where present.

    ``keys``: :func:`cache_keys` of the views (empty without a cache).
    """
    cached: dict[str, TFScore] = {}
    if cache is not None:
        cached = cache.get_many([k for row in keys for k in row])
    todo: list[tuple[int, list[int]]] = []  # (view, indices of its missing questions)
    for i, qlist in enumerate(per_view):
        miss = [j for j in range(len(qlist)) if not keys or keys[i][j] not in cached]
        if miss:
            todo.append((i, miss))
    built = [build(views[i], [per_view[i][j] for j in miss]) for i, miss in todo]
    raw = backend.true_false_logprobs(built) if built else []
    out: list[list[TFScore | None]] = [
        [cached.get(k) for k in keys[i]] if keys else [None] * len(per_view[i])
        for i in range(len(views))]
    fresh: dict[str, tuple[TFScore, str, str]] = {}
    for (i, miss), scores in zip(todo, raw, strict=True):
        for j, s in zip(miss, scores, strict=True):
            s = _folded(s, views[i])
            out[i][j] = s
            if keys and not s.bound:  # a bound is no value to reuse
                fresh[keys[i][j]] = (s, backend.model_id, per_view[i][j])
    if cache is not None:
        cache.put_many(fresh)
    return [ViewScores(tuple(s for s in row if s is not None)) for row in out]


def score_heads(backend: Backend, heads: HeadsFile, plans: Mapping[Scope, QuestionPlan],
                views: Sequence[View], build: Build, pair_end: Callable[[View], TFRequest],
                cache: GroundingCache | None, keys: Sequence[Sequence[str]]
                ) -> list[ViewScores]:
    """Scores and head P's of every view, from one stated forward each.

    Heads read hidden states, which the cache does not hold, so every view is forwarded
    (its zero-shot scores are still written to the cache for zero-shot runs).
    ``pair_end``: a request view's pair prompt cut after its request block.
    """
    per_view = [plans[v.scope].blocks for v in views]
    built = [build(v, q) for v, q in zip(views, per_view, strict=True)]
    outs = _stated(backend, heads, plans["request"], views, per_view, built, pair_end)
    result: list[ViewScores] = []
    fresh: dict[str, tuple[TFScore, str, str]] = {}
    for i, (view, qlist, out) in enumerate(zip(views, per_view, outs, strict=True)):
        scores = tuple(_folded(x, view) for x in out.scores)
        plan = plans[view.scope]
        asked_at = dict(zip((sp.name for sp in plan.specs), plan.offsets, strict=True))
        logits = {sp.name: scores[asked_at[sp.name]].logprob_true
                  - scores[asked_at[sp.name]].logprob_false
                  for sp, qs in zip(plan.specs, plan.variants, strict=True) if qs}
        result.append(ViewScores(scores, head_scores(heads, plan.specs, asked_at, out, logits)))
        if keys:
            fresh.update((k, (x, backend.model_id, q))
                         for k, q, x in zip(keys[i], qlist, scores, strict=True))
    if cache is not None:
        cache.count_forwarded(len(fresh))
        cache.put_many(fresh)
    return result


def _stated(backend: Backend, heads: HeadsFile, request_plan: QuestionPlan,
            views: Sequence[View], per_view: Sequence[Sequence[str]], built: list[TFRequest],
            pair_end: Callable[[View], TFRequest]) -> list[StatedScores]:
    """Each view's stated forward; a request's pair read rides on its pair's forward.

    A ``pair_prefix`` head reads the end of the request block inside the pair prompt,
    which no response token precedes: it is taken from a pair view of the same request
    text in this batch (one forward then serves both scopes), else from the pair
    prompt cut there. A request view that asks no question and has no request-prompt
    head is not forwarded at all.
    """
    stating = states_backend(backend)
    reads = {heads.readout_of(s.name) for s in request_plan.specs}
    source: dict[int, tuple[bool, int]] = {}  # request view -> (from a pair view?, index)
    extra: list[TFRequest] = []
    if "pair_prefix" in reads:
        pair_of: dict[str, int] = {}
        for j, v in enumerate(views):
            if v.response is not None:
                pair_of.setdefault(v.request, j)
        for i, v in enumerate(views):
            if v.response is None and v.request in pair_of:
                j = pair_of[v.request]
                built[j] = replace(built[j], marks=(request_end(built[j].prefix),))
                source[i] = (True, j)
            elif v.response is None:
                source[i] = (False, len(extra))
                extra.append(pair_end(v))
    own = [i for i, v in enumerate(views)
           if v.response is not None or per_view[i] or reads & {"question", "prefix", "pool"}]
    fwd = stating.true_false_states([built[i] for i in own] + extra, heads.layers)
    outs = dict(zip(own, fwd, strict=False))
    done = [outs.get(i, StatedScores([])) for i in range(len(views))]
    for i, (from_pair, k) in source.items():
        state = outs[k].mark_states[0] if from_pair else fwd[len(own) + k].prefix_state
        done[i] = replace(done[i], mark_states=state[None])
    return done


__all__ = ["Build", "ViewScores", "cache_keys", "score_heads", "score_views"]

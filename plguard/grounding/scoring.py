"""Forwarding views: every question's True/False log-probs per view, with states if asked.

Log-probs only (:func:`score_views`): each question is looked up in the grounding cache
first (``grounding.cache``), so only missing questions reach the backend. With states
(:func:`score_stated`): every prompt view is forwarded with the hidden states its sources
read, which the cache does not hold; :func:`score_alone` forwards the views of the
evidence alone (:mod:`plguard.grounding.alone`). What a source makes of a view's
:class:`~plguard.grounding.sources.Reading` is the source's (:mod:`plguard.grounding.sources`).

Data truncation is folded into each score's ``truncated`` flag, so a cached score carries
it without re-tokenising the data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from plguard.backends.base import Backend, StatedScores, states_backend
from plguard.grounding.prompt import request_end
from plguard.grounding.views import View
from plguard.grounding_cache import GroundingCache, cache_key
from plguard.types import TFRequest, TFScore

Build = Callable[[View, Sequence[str]], TFRequest]  # a view and its question blocks -> prompt
Scores = tuple[TFScore, ...]  # one view's question scores, in its plan's blocks order


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
                ) -> list[Scores]:
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
    return [tuple(s for s in row if s is not None) for row in out]


def score_stated(backend: Backend, layers: Sequence[int], views: Sequence[View],
                 per_view: Sequence[Sequence[str]], build: Build,
                 pair_end: Callable[[View], TFRequest], request_reads: frozenset[str],
                 cache: GroundingCache | None, keys: Sequence[Sequence[str]]
                 ) -> list[tuple[Scores, StatedScores]]:
    """Scores and states of every prompt view, from one stated forward each.

    States are not cached, so every view is forwarded (its scores are still written to
    the cache for runs that read log-probs only). ``pair_end``: a request view's pair
    prompt cut after its request block; ``request_reads``: the states request predicates'
    sources read of a request's prompt view (:data:`plguard.grounding.sources.STATES`).
    """
    built = [build(v, q) for v, q in zip(views, per_view, strict=True)]
    outs = _stated(backend, layers, request_reads, views, per_view, built, pair_end)
    result: list[tuple[Scores, StatedScores]] = []
    fresh: dict[str, tuple[TFScore, str, str]] = {}
    for i, (view, qlist, out) in enumerate(zip(views, per_view, outs, strict=True)):
        scores = tuple(_folded(x, view) for x in out.scores)
        result.append((scores, out))
        if keys:
            fresh.update((k, (x, backend.model_id, q))
                         for k, q, x in zip(keys[i], qlist, scores, strict=True))
    if cache is not None:
        cache.count_forwarded(len(fresh))
        cache.put_many(fresh)
    return result


def _stated(backend: Backend, layers: Sequence[int], reads: frozenset[str],
            views: Sequence[View], per_view: Sequence[Sequence[str]], built: list[TFRequest],
            pair_end: Callable[[View], TFRequest]) -> list[StatedScores]:
    """Each view's stated forward; a request's pair read rides on its pair's forward.

    A ``pair_prefix`` read is the end of the request block inside the pair prompt, which
    no response token precedes: it is taken from a pair view of the same request text in
    this batch (one forward then serves both scopes), else from the pair prompt cut
    there. A request view that asks no question and whose predicates read nothing else of
    its prompt is not forwarded at all.
    """
    stating = states_backend(backend)
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
    fwd = stating.true_false_states([built[i] for i in own] + extra, layers)
    outs = dict(zip(own, fwd, strict=False))
    done = [outs.get(i, StatedScores([])) for i in range(len(views))]
    for i, (from_pair, k) in source.items():
        state = outs[k].mark_states[0] if from_pair else fwd[len(own) + k].prefix_state
        done[i] = replace(done[i], mark_states=state[None])
    return done


def score_alone(backend: Backend, layers: Sequence[int], views: Sequence[TFRequest]
                ) -> list[StatedScores]:
    """The pooled states of views of the evidence alone, batched by the backend."""
    if not views:
        return []
    return states_backend(backend).true_false_states(list(views), layers)


__all__ = ["Build", "Scores", "cache_keys", "score_alone", "score_stated", "score_views"]

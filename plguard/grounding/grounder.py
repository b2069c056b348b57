"""The Grounder: a policy's predicates scored on (request, response) pairs with one backend.

It holds what is fixed for its life (the questions each scope asks, the rendered
templates, the resolved heads and calibration, the cache) and runs the stages of the
other modules over each batch: screen, views, scoring, combine.

Request-scope predicates see only the request, so their scores are computed once per
distinct request text and reused for the draft and every repaired answer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from plguard.backends.base import Backend
from plguard.calibration import Calibration
from plguard.config import GroundingConfig
from plguard.errors import InputError
from plguard.grounding.combine import combine
from plguard.grounding.prompt import (
    ANSWER_WORDS,
    QuestionPlan,
    Template,
    build_prompt,
    plan_questions,
    question_block,
    question_digest,
    render_template,
    request_end_prompt,
    template_version,
)
from plguard.grounding.resolve import Resolved, check_predicates, resolve
from plguard.grounding.scoring import ViewScores, cache_keys, score_heads, score_views
from plguard.grounding.views import View, views
from plguard.grounding_cache import GroundingCache, resolve_cache_path
from plguard.heads.artefact import HeadsFile
from plguard.screen import screen
from plguard.types import (
    Grounding,
    PredicateScore,
    PredicateSpec,
    Scope,
    ScreenFinding,
    TFRequest,
)

# Distinct request texts whose request-scope scores a Grounder keeps (least recently used
# evicted first): enough for a draft and its repairs across a server's concurrent requests,
# small enough that a long-running server does not grow without bound.
REQUEST_MEMO_SIZE = 512


class Grounder:
    """Scores a policy's predicates on (request, response) pairs with one backend.

    ``resolved``: the heads and calibration to apply, from
    :func:`~plguard.grounding.resolve.resolve` (by default resolved here from ``cfg``).
    """

    def __init__(self, backend: Backend, predicates: Sequence[PredicateSpec],
                 cfg: GroundingConfig | None = None, *, policy_name: str | None = None,
                 resolved: Resolved | None = None) -> None:
        self.backend = backend
        self.predicates = tuple(predicates)
        self.cfg = cfg or GroundingConfig.model_validate({})
        check_predicates(self.predicates)
        self.answers = ANSWER_WORDS[self.cfg.answer_words]
        self.template_version = template_version(self.cfg)
        if resolved is None:
            resolved = resolve(backend, self.predicates, self.cfg, policy_name)
        self.heads: HeadsFile | None = resolved.heads
        self.calibration_file: Calibration | None = resolved.calibration
        self.calibration: dict[str, tuple[float, float]] = dict(resolved.platt)
        self.cache: GroundingCache | None = (
            GroundingCache(resolve_cache_path(self.cfg.cache)) if self.cfg.cache else None)
        self._plans: dict[Scope, QuestionPlan] = {
            s: plan_questions([p for p in self.predicates if p.scope == s], self.cfg,
                              self.heads)
            for s in ("request", "response")}
        self._request_memo: OrderedDict[str, tuple[PredicateScore, ...]] = OrderedDict()
        self._templates: dict[Scope, Template] = {}

    def close(self) -> None:
        """Close the grounding cache's connections (the backend is its owner's to close)."""
        if self.cache is not None:
            self.cache.close()

    # -- prompts ---------------------------------------------------------------------------

    def _template(self, scope: Scope) -> Template:
        if scope not in self._templates:
            self._templates[scope] = render_template(self.backend, scope, self.answers)
        return self._templates[scope]

    def question_block(self, spec: PredicateSpec, question: str) -> str:
        """The text that asks ``question`` of ``spec`` (see :func:`question_block`)."""
        return question_block(spec, question, self.answers, self.cfg.examples)

    def question_digest(self, spec: PredicateSpec) -> str:
        """sha256 of how ``spec`` is asked (see :func:`question_digest`)."""
        return question_digest(spec, self.cfg)

    def _views(self, request: str, response: str | None) -> list[View]:
        return views(self.backend, self.cfg, request, response)

    def _build(self, view: View, questions: Sequence[str] | None = None) -> TFRequest:
        qs = self._plans[view.scope].blocks if questions is None else questions
        return build_prompt(self._template(view.scope), view.request, view.response,
                                   qs, self.answers, self.cfg.batch_size)

    def _request_end_prompt(self, view: View) -> TFRequest:
        return request_end_prompt(self._template("response"), view.request,
                                         self.answers)

    def prompts(self, request: str, response: str | None) -> TFRequest:
        """The grounding prompt(s) of the first view (request-scope when no response)."""
        return self._build(self._views(request, response)[0])

    def windows(self, request: str, response: str) -> list[TFRequest]:
        """The response-scope prompts of every window of a (long) response."""
        return [self._build(v) for v in self._views(request, response)]

    def request_end_prompt(self, request: str) -> TFRequest:
        """The pair prompt of ``request`` up to the end of its request block (no question)."""
        return self._request_end_prompt(self._views(request, None)[0])

    # -- scoring ---------------------------------------------------------------------------

    def ground(self, pairs: Sequence[tuple[str, str]], *, response: bool = True
               ) -> list[Grounding]:
        """Ground every predicate on each (request, response) pair, batched.

        ``response=False`` grounds the request-scope predicates only (each pair's response
        is not read): the Groundings then hold no response-scope score. It judges a request
        that has no answer yet (a stream's request check, :meth:`plguard.Guard.moderate`).
        """
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, tuple | list) and len(pair) == 2
                    and all(isinstance(x, str) for x in pair)):
                raise InputError(f"grounding pair {i} must be (request: str, response: str)")
        # What the grounder reads: the pair without text addressed to the guard. Text with
        # nothing found is passed on unchanged, so ordinary prompts and caches are as before.
        found: list[tuple[ScreenFinding, ...]] = [() for _ in pairs]
        parts: list[tuple[str, ...]] = [(s,) for _, s in pairs]
        if self.cfg.screen != "off":
            screened = [screen(r, s) for r, s in pairs]
            pairs = [(x.request, x.response or "") for x in screened]
            found = [x.findings for x in screened]
            parts = [x.response_parts or (x.response or "",) for x in screened]
        # This batch's request scores are held here, not read back from the memo, so an
        # eviction while memoising cannot lose scores the batch still needs.
        req_scores_of: dict[str, tuple[PredicateScore, ...]] = {}
        todo_req: list[str] = []
        if self._plans["request"].specs:
            for r in dict.fromkeys(r for r, _ in pairs):
                if r in self._request_memo:
                    req_scores_of[r] = self._request_memo[r]
                    self._request_memo.move_to_end(r)
                else:
                    todo_req.append(r)
        vs: list[View] = [v for r in todo_req for v in self._views(r, None)]
        owners: list[int] = list(range(len(todo_req)))  # view -> item it belongs to
        with_response = response and bool(self._plans["response"].specs)
        if with_response:
            for i, (req, _) in enumerate(pairs):
                # Each piece of a response split at a fake delimiter or turn marker is read
                # on its own, and the pieces combine like windows (plguard.screen).
                mine = [v for piece in parts[i] for v in self._views(req, piece)]
                vs += mine
                owners += [len(todo_req) + i] * len(mine)
        raw = self._score(vs)
        per_item: list[list[tuple[View, ViewScores]]] = [
            [] for _ in range(len(todo_req) + len(pairs))]
        for view, item, scores in zip(vs, owners, raw, strict=True):
            per_item[item].append((view, scores))
        for k, req in enumerate(todo_req):
            req_scores_of[req] = self._combine("request", per_item[k])
            self._remember(req, req_scores_of[req])
        out = []
        for i, (req, _) in enumerate(pairs):
            req_scores = req_scores_of.get(req, ())
            resp_scores = (self._combine("response", per_item[len(todo_req) + i])
                           if with_response else ())
            by_name = {s.name: s for s in (*req_scores, *resp_scores)}
            out.append(Grounding(model=self.backend.model_id,
                                 scores=tuple(by_name[p.name] for p in self.predicates
                                              if p.name in by_name),
                                 template_version=self.template_version,
                                 calibration=(self.calibration_file.label
                                              if self.calibration_file else ""),
                                 screen=found[i],
                                 heads=self.heads.label if self.heads else ""))
        return out

    def _score(self, vs: Sequence[View]) -> list[ViewScores]:
        """Every question's score per view (and heads' P's), from the cache where present."""
        if not vs:
            return []
        per_view = [self._plans[v.scope].blocks for v in vs]
        keys = (cache_keys(self.backend.model_id, self.template_version,
                           self.cfg.max_data_tokens, vs, per_view)
                if self.cache is not None else [])
        if self.heads is not None:
            return score_heads(self.backend, self.heads, self._plans, vs, self._build,
                               self._request_end_prompt, self.cache, keys)
        return score_views(self.backend, vs, per_view, self._build, self.cache, keys)

    def _combine(self, scope: Scope, vs: Sequence[tuple[View, ViewScores]]
                 ) -> tuple[PredicateScore, ...]:
        return combine(scope, self._plans[scope], vs, mode=self.cfg.combine,
                       unseen_rule=self.cfg.unseen, calibration=self.calibration)

    def _remember(self, request: str, scores: tuple[PredicateScore, ...]) -> None:
        self._request_memo[request] = scores
        self._request_memo.move_to_end(request)
        while len(self._request_memo) > REQUEST_MEMO_SIZE:
            self._request_memo.popitem(last=False)

    def clear_cache(self) -> None:
        """Forget memoised request-scope scores."""
        self._request_memo.clear()


__all__ = ["REQUEST_MEMO_SIZE", "Grounder"]

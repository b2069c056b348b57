"""The Grounder: a policy's predicates scored on (request, response) pairs with one backend.

It holds what is fixed for its life (its predicate sources, the questions each scope
asks, the rendered templates, the cache) and runs the stages of the other modules over
each batch: screen, views (the grounding prompts, and the evidence alone where a source
reads it), forwards, combine.

Request-scope predicates see only the request, so their scores are computed once per
distinct request text and reused for the draft and every repaired answer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import cast

from plguard.backends.base import Backend
from plguard.calibration import Calibration
from plguard.config import GroundingConfig
from plguard.errors import InputError
from plguard.grounding.alone import (
    ANSWER_WINDOW_OVERLAP,
    ANSWER_WINDOW_TOKENS,
    AloneTemplate,
    answer_windows,
    render_alone,
    request_view,
)
from plguard.grounding.combine import ItemViews, combine
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
from plguard.grounding.scoring import cache_keys, score_alone, score_stated, score_views
from plguard.grounding.sources import (
    HeadsSource,
    PredicateSource,
    Reading,
    ViewKind,
    ZeroShotSource,
    deciding,
)
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
        # The sources in order: the first that reads a predicate decides it; zero-shot
        # reads every one (and stays in the trace wherever its question is asked).
        self.zero = ZeroShotSource(self.cfg.combine, self.calibration,
                                   self.calibration_file.label if self.calibration_file
                                   else "")
        self.sources: tuple[PredicateSource, ...] = (
            (HeadsSource(self.heads, {p.name: p.scope for p in self.predicates}), self.zero)
            if self.heads is not None else (self.zero,))
        self._plans: dict[Scope, QuestionPlan] = {
            s: plan_questions([p for p in self.predicates if p.scope == s], self.cfg,
                              lambda spec: deciding(self.sources, spec).asks(spec))
            for s in ("request", "response")}
        self._asked: dict[Scope, dict[str, tuple[int, int]]] = {
            s: {sp.name: (off, len(qs)) for sp, off, qs
                in zip(plan.specs, plan.offsets, plan.variants, strict=True) if qs}
            for s, plan in self._plans.items()}
        # The view each predicate's deciding source reads, per scope.
        self._reads: dict[Scope, set[ViewKind]] = {
            s: {cast(ViewKind, deciding(self.sources, sp).view_of(sp))
                for sp in self._plans[s].specs}
            for s in ("request", "response")}
        # The response predicates read from the pair prompt (what ``skip`` can spare).
        self._pair_read = frozenset(sp.name for sp in self._plans["response"].specs
                                    if deciding(self.sources, sp).view_of(sp) == "prompt")
        self._request_memo: OrderedDict[str, tuple[PredicateScore, ...]] = OrderedDict()
        self._templates: dict[Scope, Template] = {}
        self._alone: AloneTemplate | None = None
        alone = self.heads.alone if self.heads is not None else {}
        self._window = (int(alone.get("window_tokens", ANSWER_WINDOW_TOKENS)),
                        int(alone.get("window_overlap", ANSWER_WINDOW_OVERLAP)))

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

    def ground(self, pairs: Sequence[tuple[str, str]], *, response: bool = True,
               skip: frozenset[str] = frozenset()) -> list[Grounding]:
        """Ground every predicate on each (request, response) pair, batched.

        ``response=False`` grounds the request-scope predicates only (each pair's response
        is not read): the Groundings then hold no response-scope score. It judges a request
        that has no answer yet (a stream's request check, :meth:`plguard.Guard.moderate`).
        ``skip``: response predicates the caller does not need; when every response
        predicate read from the pair prompt is among them, the pair prompt is not read and
        their scores are absent (a stream's partial window, whose decision reads the
        unsafe and content rules only: plguard.judging, bound ``window``).
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
        n_req = len(todo_req)
        with_response = response and bool(self._plans["response"].specs)
        # The pair prompt is read for the response predicates that need it, unless skipped.
        on_pair = bool(self._pair_read - skip)
        vs: list[View] = ([v for r in todo_req for v in self._views(r, None)]
                          if "prompt" in self._reads["request"] else [])
        owners: list[int] = list(range(len(vs)))  # view -> item it belongs to
        answers: list[tuple[int, str]] = []  # (item, answer piece) read alone
        if with_response:
            for i, (req, _) in enumerate(pairs):
                # Each piece of a response split at a fake delimiter or turn marker is read
                # on its own, and the pieces combine like windows (plguard.screen).
                mine = ([v for piece in parts[i] for v in self._views(req, piece)]
                        if on_pair else [])
                vs += mine
                owners += [n_req + i] * len(mine)
                answers += [(n_req + i, piece) for piece in parts[i]]
        read = self._read_prompt(vs)
        per_item = [ItemViews([]) for _ in range(n_req + len(pairs))]
        prompt_of: list[list[tuple[View, Reading]]] = [[] for _ in per_item]
        for view, item, reading in zip(vs, owners, read, strict=True):
            prompt_of[item].append((view, reading))
        alone_of, cut_of = self._read_alone(
            todo_req if "request" in self._reads["request"] else [],
            answers if with_response and "answer" in self._reads["response"] else [],
            len(per_item))
        per_item = [ItemViews(prompt_of[k], alone_of[k], cut_of[k])
                    for k in range(len(per_item))]
        for k, req in enumerate(todo_req):
            req_scores_of[req] = self._combine("request", per_item[k])
            self._remember(req, req_scores_of[req])
        out = []
        for i, (req, _) in enumerate(pairs):
            req_scores = req_scores_of.get(req, ())
            resp_scores = (self._combine("response", per_item[n_req + i],
                                         () if on_pair else self._pair_read)
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

    def _read_prompt(self, vs: Sequence[View]) -> list[Reading]:
        """Every prompt view's question scores and the states its sources read.

        Log-probs alone come from the grounding cache where present.
        """
        if not vs:
            return []
        per_view = [self._plans[v.scope].blocks for v in vs]
        keys = (cache_keys(self.backend.model_id, self.template_version,
                           self.cfg.max_data_tokens, vs, per_view)
                if self.cache is not None else [])
        layers = sorted({x for s in self.sources for x in s.layers("prompt")})
        if not layers:
            return [Reading(sc, self._asked[v.scope]) for v, sc in
                    zip(vs, score_views(self.backend, vs, per_view, self._build, self.cache,
                                        keys), strict=True)]
        reads = frozenset(x for sp in self._plans["request"].specs
                          for x in deciding(self.sources, sp).states(sp)
                          if deciding(self.sources, sp).view_of(sp) == "prompt")
        out = score_stated(self.backend, layers, vs, per_view, self._build,
                           self._request_end_prompt, reads, self.cache, keys)
        return [Reading(sc, self._asked[v.scope], st)
                for v, (sc, st) in zip(vs, out, strict=True)]

    def _read_alone(self, requests: Sequence[str], answers: Sequence[tuple[int, str]],
                    n_items: int) -> tuple[list[list[Reading]], list[bool]]:
        """The readings of the evidence alone, in one batched pass.

        Each request is item ``k`` (its index), each answer piece's windows belong to
        their item.
        """
        alone: list[list[Reading]] = [[] for _ in range(n_items)]
        cut = [False] * n_items
        if not requests and not answers:
            return alone, cut
        if self._alone is None:
            self._alone = render_alone(self.backend)
        reqs, owner = [], []
        for k, r in enumerate(requests):
            view, cut[k] = request_view(self.backend, self._alone, r, self.cfg.max_data_tokens)
            reqs.append(view)
            owner.append(k)
        wins, win_owner = [], []
        for item, piece in answers:
            w = answer_windows(self.backend, self._alone, piece, *self._window)
            wins += w
            win_owner += [item] * len(w)
        # Each kind of view as deep as its own heads read (the content heads of the
        # embedded model: layer 15 of 30), so an answer window's forward stops there.
        for read, owners, kind in ((reqs, owner, "request"), (wins, win_owner, "answer")):
            layers = tuple(sorted({x for s in self.sources
                                   for x in s.layers(cast(ViewKind, kind))}))
            for item, st in zip(owners, score_alone(self.backend, layers, read),
                                strict=True):
                alone[item].append(Reading(stated=st, layers=layers))
        return alone, cut

    def _combine(self, scope: Scope, item: ItemViews, unread: Collection[str] = ()
                 ) -> tuple[PredicateScore, ...]:
        specs = [sp for sp in self._plans[scope].specs if sp.name not in unread]
        return combine(scope, specs, self.sources, self.zero, item,
                       unseen_rule=self.cfg.unseen)

    def _remember(self, request: str, scores: tuple[PredicateScore, ...]) -> None:
        self._request_memo[request] = scores
        self._request_memo.move_to_end(request)
        while len(self._request_memo) > REQUEST_MEMO_SIZE:
            self._request_memo.popitem(last=False)

    def clear_cache(self) -> None:
        """Forget memoised request-scope scores."""
        self._request_memo.clear()


__all__ = ["REQUEST_MEMO_SIZE", "Grounder"]

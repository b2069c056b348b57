"""One PredicateScore per predicate: its source's P per view, combined by its window rule.

Each predicate is decided by the first source that reads it
(:func:`plguard.grounding.sources.deciding`): the source's P on each of its views (the
prompt views, or the request alone, or each answer window alone) is combined by the rule
the predicate declares (:mod:`plguard.windows`) and passed through the source's own map
(a calibration's Platt scaling for zero-shot; a head's P is its own). The zero-shot
reading stays in the trace wherever the predicate's question was asked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from plguard.grounding.sources import PredicateSource, Reading, ZeroShotSource, deciding
from plguard.grounding.sources.zeroshot import NOT_ASKED, Merged
from plguard.grounding.views import View
from plguard.types import PredicateScore, PredicateSpec, Scope
from plguard.windows import DEFAULT_RULE, WindowRule, combine_windows


@dataclass(frozen=True, slots=True)
class ItemViews:
    """The read views of one item of one scope.

    ``prompt``: its grounding-prompt views (windows of a long answer) with their readings;
    ``alone``: the readings of the evidence alone (the request, or each answer window;
    empty when no source reads them); ``alone_cut``: the request alone was cut to fit.
    """

    prompt: Sequence[tuple[View, Reading]]
    alone: Sequence[Reading] = ()
    alone_cut: bool = False


def combine(scope: Scope, specs: Sequence[PredicateSpec],
            sources: Sequence[PredicateSource], zero: ZeroShotSource, item: ItemViews, *,
            unseen_rule: str) -> tuple[PredicateScore, ...]:
    """One score per predicate of ``specs`` over an item's views of ``scope``.

    ``sources``: the Grounder's sources in order (the first that reads a predicate decides
    it); ``zero``: the zero-shot source among them, whose reading the trace keeps;
    ``unseen_rule``: ``grounding.unseen``.
    """
    unseen = any(v.unseen for v, _ in item.prompt)
    return tuple(_one(scope, spec, deciding(sources, spec), zero, item, unseen, unseen_rule)
                 for spec in specs)


def _one(scope: Scope, spec: PredicateSpec, src: PredicateSource, zero: ZeroShotSource,
         item: ItemViews, unseen: bool, unseen_rule: str) -> PredicateScore:
    rule = cast(WindowRule, spec.windows or DEFAULT_RULE)
    kind = src.view_of(spec)
    merged = [zero.merged(spec, r) for _, r in item.prompt] or [NOT_ASKED]
    on_prompt = kind == "prompt"
    readings = [r for _, r in item.prompt] if on_prompt else list(item.alone)
    ps = [src.read(spec, r) for r in readings]
    # Windows off: a cut response's unseen middle is one more prompt window at the prior.
    prior = on_prompt and unseen and unseen_rule == "prior" and rule != "first"
    prior_p = 0.5 if spec.prior is None else spec.prior
    if prior:
        ps.append(prior_p)
    p, at = combine_windows(ps, rule)
    p = src.finish(spec, p)
    # The zero-shot reading shown: its deciding prompt view where it was asked.
    zs = [m.p for m in merged] + ([prior_p] if unseen and unseen_rule == "prior"
                                 and rule != "first" else [])
    asked = all(math.isfinite(m.p) for m in merged)
    z_at = combine_windows(zs, rule)[1] if asked else 0
    shown: Merged = merged[at if on_prompt and 0 <= at < len(merged)
                           else (z_at if 0 <= z_at < len(merged) else 0)]
    p_zero = (p if src is zero else zero.finish(spec, combine_windows(zs, rule)[0])
              if asked else None)
    cut = (shown.truncated or (src is not zero and any(v.cut for v, _ in item.prompt))
           if on_prompt else item.alone_cut)
    unseen = unseen and on_prompt  # alone windows read all of the answer
    return PredicateScore(
        name=spec.name, p_true=p, logprob_true=shown.logprob_true,
        logprob_false=shown.logprob_false, scope=scope, truncated=cut or unseen,
        variants=shown.variants, variant_spread=shown.spread,
        windows=tuple(ps) if len(ps) > 1 else (),
        window=at if len(ps) > 1 else -1, unseen=unseen,
        bound=any(m.bound for m in merged), p_zeroshot=p_zero,
        p_head=p if src.kind == "head" else None, source=src.kind,
        view=kind or "prompt")


__all__ = ["ItemViews", "combine"]

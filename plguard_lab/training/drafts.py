"""The generator's own answers as training pairs for response heads (``--drafts N``).

The corpus's answers come from other models (XSTest's five, CoCoNot's ``chosen``); heads
trained only on them miss much of what *this* generator writes (docs/quality.md). So
``plguard heads fit --drafts N`` lets the generator answer N dev prompts of every kind
and trains the response heads on those pairs beside the others.

How each answer is labelled (never by the guard being fitted):

* **Request label**: the data set's own (``label`` of the prompt: safe, unsafe, plain).
* **Refusal**: read twice, independently, and kept only where both readings agree:
  (a) the XSTest authors' string match (:func:`plguard_lab.labels.xstest.regex_xstest`: a
  refusal opens with one of their prefixes), and (b) a refusal head:
  ``P(response_refuses) >= 0.5`` of the ``minimal`` bundle on the grounding model, read
  through the heads shipped for it where the grounder is the embedded model
  (``grounding.heads: auto``), zero-shot otherwise. Both agree on a refusal:
  ``final_label`` ``2_full_refusal``; both on an answer: ``1_full_compliance``. A pair where
  they disagree is dropped and counted: either reader alone is wrong often enough on a
  small model's answers (the string match misses polite refusals, the head misreads
  rambling) that one vote would put its errors into the labels.
* **Response labels** then follow from the bundle's ``gold.yaml`` rules over the fields,
  as for XSTest's human-labelled answers (``final_label`` with the request's ``label``),
  except that a ``plain`` request's draft is labelled as a ``safe`` one's (its data-set
  label kept as ``request_label``): the bundles' answer rules read ``label: safe`` as
  "asks for nothing harmful", which a plain request (no harm category) is too, while
  ``plain`` would fall through to ``final_label`` and call a plain answer harmful help.

Drafts are written to a JSONL file, one record per prompt, flushed as each batch finishes
(:class:`plguard.records.store.JsonlStore`): a rerun skips every prompt already there,
dropped ones included, and a torn last line is redone. Prompts are drawn by
:func:`select_prompts` so that a smaller N is contained in a larger one: raising N reuses
every stored draft.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plguard.config import GuardConfig
from plguard.errors import ConfigError
from plguard_lab.training.corpus import SOURCES, SPLIT_SEED, CorpusItem, load_corpus

SOURCE = "drafts"  # the source name of draft items in the training set
REFUSAL_POLICY = "minimal"
REFUSAL_PREDICATE = "response_refuses"
REFUSED_AT = 0.5
COMPLY = "1_full_compliance"
REFUSE = "2_full_refusal"
LABELS = ("request: the data set's label (plain as safe); refusal: the XSTest string match "
          "and minimal's response_refuses head (P >= 0.5) must agree, else the pair is "
          "dropped (plguard_lab.training.drafts)")


@dataclass
class DraftsResult:
    """What :func:`make_drafts` did and the training items it gives."""

    items: list[CorpusItem]  # kept drafts, as corpus items of source "drafts"
    n_asked: int  # prompts selected
    n_generated_now: int  # drafts written by this call (the rest were stored)
    n_dropped: int  # the two refusal readings disagreed
    counts: dict[tuple[str, str, str], int]  # (source, label, final_label) of kept ones
    seconds: float
    path: Path  # the drafts file
    n_failed: int = 0  # prompts whose generation or reading failed (a rerun retries them)

    def summary(self) -> dict[str, Any]:
        """The heads file's ``training.drafts`` block."""
        return {"n": self.n_asked, "kept": len(self.items),
                "dropped_disagreements": self.n_dropped, "failed": self.n_failed,
                "file": str(self.path), "labels": LABELS,
                "counts": {"/".join(k): v for k, v in sorted(self.counts.items())}}


def default_drafts_path(heads_file: str | Path) -> Path:
    """``<heads file stem>.drafts.jsonl`` beside the heads file."""
    return Path(heads_file).with_suffix(".drafts.jsonl")


def _rank(seed: int, uid: str) -> bytes:
    return hashlib.sha256(f"{seed}:{uid}".encode()).digest()


def select_prompts(n: int, sources: Sequence[str] = SOURCES, seed: int = SPLIT_SEED
                   ) -> list[CorpusItem]:
    """``n`` dev requests, round-robin over (source, label) strata.

    Every kind of prompt is answered even for a small N (a plain draw would be mostly
    AILuminate's hazardous prompts). Each stratum is ordered by a seeded hash of the uid
    and the strata (sorted) are visited in turn, so the order does not depend on N: a
    smaller N is the head of a larger one, and a rerun with more drafts reuses every stored
    one. Fewer than ``n`` come back when the sources hold fewer requests.
    """
    strata: dict[tuple[str, str], list[CorpusItem]] = {}
    for it in load_corpus(sources, "dev"):
        if it.response is None:
            strata.setdefault((it.source, str(it.fields.get("label"))), []).append(it)
    queues = [sorted(strata[k], key=lambda it: _rank(seed, it.uid)) for k in sorted(strata)]
    out: list[CorpusItem] = []
    depth = 0
    while len(out) < n and any(depth < len(q) for q in queues):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out[:max(0, n)]


def final_label(strmatch_refused: bool, p_refuses: float) -> str | None:
    """The draft's refusal label when both readings agree, else None (dropped)."""
    head_refused = p_refuses >= REFUSED_AT
    if strmatch_refused != head_refused:
        return None
    return REFUSE if head_refused else COMPLY


def refusal_reader(backend: Any, config: GuardConfig) -> Any:
    """A Grounder of the minimal bundle: its ``response_refuses`` is refusal reading (b).

    The whole bundle, because a heads file is refused by a Grounder that lacks any of its
    predicates. The fitted config's heads and calibration belong to the policy being
    fitted: the reader uses the shipped minimal heads where they apply, else zero-shot.
    """
    from plguard.grounding import Grounder
    from plguard.policy import load_policy

    minimal = load_policy(REFUSAL_POLICY)
    cfg = config.grounding.model_copy(update={"heads": "auto", "calibration": None})
    return Grounder(backend, minimal.predicates, cfg, policy_name=minimal.name)


def make_drafts(config: GuardConfig, n: int, path: str | Path, *,
                sources: Sequence[str] = SOURCES, progress: bool = True,
                generator: Any = None, grounder: Any = None,
                seed: int = SPLIT_SEED) -> DraftsResult:
    """Draft answers to :func:`select_prompts` prompts, label them, store them in ``path``.

    ``generator``/``grounder``: backends to use (default: ``config``'s generator and
    grounder models, loaded here and released after). The grounder reads refusals only.
    Returns the kept drafts as corpus items (the module doc says how they are labelled).
    """
    from plguard.backends import load_backend, release_backend
    from plguard.grounding import backend_identity
    from plguard.messages import to_chat
    from plguard.records.loop import error_text, map_into
    from plguard.records.store import JsonlStore, exclusive
    from plguard.types import GenerationParams
    from plguard_lab.labels.xstest import regex_xstest

    t0 = time.perf_counter()
    prompts = select_prompts(n, sources, seed)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    owned: list[Any] = []
    if generator is None:
        generator = load_backend(config.generator)
        owned.append(generator)
    if grounder is None:
        grounder = load_backend(config.grounder_model)
        owned.append(grounder)
    try:
        with exclusive(out.with_name(f".{out.name}.lock"), out, "use another --drafts-file"):
            store = JsonlStore(out)
            identity = backend_identity(generator)
            _check_same_generator(store, prompts, identity, out)
            reader = refusal_reader(grounder, config)
            reader_name = reader.heads.label if reader.heads else "zero-shot"
            g = config.generation
            params = GenerationParams(max_new_tokens=g.max_new_tokens,
                                      temperature=g.temperature)

            def draft(chunk: Sequence[CorpusItem]) -> list[dict[str, Any]]:
                gens = generator.generate([to_chat(it.request, it.uid) for it in chunk],
                                          params)
                texts = [x.text for x in gens]
                read = reader.ground([(it.request, t) for it, t in zip(chunk, texts,
                                                                       strict=True)])
                return [{"response": t, "n_new_tokens": x.n_new_tokens,
                         "p": r.probs[REFUSAL_PREDICATE]}
                        for t, x, r in zip(texts, gens, read, strict=True)]

            def record(it: CorpusItem, res: dict[str, Any] | BaseException
                       ) -> dict[str, Any]:
                rec: dict[str, Any] = {"id": it.uid, "uid": it.uid, "source": it.source,
                                       "prompt_id": it.prompt_id, "request": it.request,
                                       "label": it.fields.get("label"), "model": identity}
                if isinstance(res, BaseException):
                    return {**rec, "error": error_text(res)}
                refused = regex_xstest(res["response"]) == REFUSE
                return {**rec, "response": res["response"],
                        "n_new_tokens": res["n_new_tokens"],
                        "max_new_tokens": g.max_new_tokens, "strmatch_refusal": refused,
                        "head_p_refuses": round(float(res["p"]), 6),
                        "refusal_reader": reader_name,
                        "final_label": final_label(refused, float(res["p"]))}

            try:
                done = map_into(store, prompts, lambda it: it.uid, draft, record,
                                chunk=config.generator.batch_size, desc="drafts",
                                unit="prompt", progress=progress)
            finally:
                reader.close()
    finally:
        for b in owned:
            release_backend(b)
    items, counts, dropped, failed = _collect(prompts, store)
    return DraftsResult(items, len(prompts), done.written - done.errors, dropped,
                        dict(counts), round(time.perf_counter() - t0, 1), out, failed)


def load_drafts(path: str | Path, n: int, sources: Sequence[str] = SOURCES,
                seed: int = SPLIT_SEED) -> DraftsResult:
    """The kept drafts a ``make_drafts(..., n, path, sources=...)`` run stored.

    Read back without a model: threshold fits use a heads file's drafts this way.
    """
    from plguard.records.store import JsonlStore

    prompts = select_prompts(n, sources, seed)
    items, counts, dropped, failed = _collect(prompts, JsonlStore(Path(path)))
    return DraftsResult(items, len(prompts), 0, dropped, dict(counts), 0.0, Path(path), failed)


def _collect(prompts: Sequence[CorpusItem], store: Any
             ) -> tuple[list[CorpusItem], Counter[tuple[str, str, str]], int, int]:
    """(kept draft items, their counts, dropped, failed) of ``prompts`` in ``store``."""
    items: list[CorpusItem] = []
    counts: Counter[tuple[str, str, str]] = Counter()
    dropped = failed = 0
    for it in prompts:
        rec = store.get(it.uid)
        if rec is None or rec.get("error"):
            failed += 1
        elif rec.get("final_label") is None:
            dropped += 1
        else:
            items.append(draft_item(it, rec["response"], rec["final_label"]))
            counts[it.source, str(it.fields.get("label")), rec["final_label"]] += 1
    return items, counts, dropped, failed


def draft_item(prompt: CorpusItem, response: str, label: str) -> CorpusItem:
    """A kept draft as a corpus item: source ``drafts``, split and grouped by its prompt."""
    fields = {**prompt.fields, "final_label": label, "draft_of": prompt.source}
    if fields.get("label") == "plain":  # see the module doc
        fields.update(label="safe", request_label="plain")
    return CorpusItem(f"{SOURCE}/{prompt.uid}", SOURCE, f"{prompt.source}/{prompt.prompt_id}",
                      prompt.request, response, fields)


def _check_same_generator(store: Any, prompts: Sequence[CorpusItem],
                          identity: dict[str, Any], path: Path) -> None:
    """Refuse to resume a drafts file another generator wrote: its answers are not ours."""
    for it in prompts:
        rec = store.get(it.uid)
        other = (rec or {}).get("model") or {}
        if rec is not None and other.get("model_id") != identity["model_id"]:
            raise ConfigError(f"{path} holds drafts of {other.get('model_id')!r}, not of "
                              f"{identity['model_id']!r}; use another --drafts-file or "
                              "delete it")


__all__ = ["COMPLY", "LABELS", "REFUSE", "REFUSED_AT", "SOURCE", "DraftsResult",
           "default_drafts_path", "draft_item", "final_label", "load_drafts", "make_drafts",
           "refusal_reader", "select_prompts"]

"""Grounding: predicate prompts and P(True) for every predicate of a (request, response).

The stages, one module each, the Grounder running them over a batch:

* :mod:`~plguard.grounding.prompt`: the prompt text, its delimiters and data escaping, the
  chat template split at the question, what each scope asks (:class:`QuestionPlan`);
* :mod:`~plguard.grounding.views`: what each prompt shows of an item (the data budget,
  windows of a long response);
* :mod:`~plguard.grounding.resolve`: the heads and calibration files, resolved and checked
  once before a Grounder is built (:class:`Resolved`);
* :mod:`~plguard.grounding.scoring`: True/False log-probs per view through the grounding
  cache, or stated forwards and heads' P's;
* :mod:`~plguard.grounding.combine`: paraphrases merged, windows combined, calibration;
* :mod:`~plguard.grounding.grounder`: :class:`Grounder`, screening, the request memo.
"""

from __future__ import annotations

from plguard.calibration import platt
from plguard.grounding.grounder import REQUEST_MEMO_SIZE, Grounder
from plguard.grounding.prompt import (
    ANSWER_CUE,
    ANSWER_WORDS,
    SYSTEM,
    TEMPLATE_VERSION,
    QuestionPlan,
    close_tag,
    escape_data,
    open_tag,
    question_block,
    question_digest,
    request_end,
    template_version,
)
from plguard.grounding.resolve import Resolved, backend_identity, load_calibration, resolve
from plguard.grounding.views import split_budget

__all__ = [
    "ANSWER_CUE",
    "ANSWER_WORDS",
    "REQUEST_MEMO_SIZE",
    "SYSTEM",
    "TEMPLATE_VERSION",
    "Grounder",
    "QuestionPlan",
    "Resolved",
    "backend_identity",
    "close_tag",
    "escape_data",
    "load_calibration",
    "open_tag",
    "platt",
    "question_block",
    "question_digest",
    "request_end",
    "resolve",
    "split_budget",
    "template_version",
]

"""Extract (resumably) the hidden-state features heads are fitted and measured on.

    python scripts/heads_features.py --model embedded --policies minimal,detailed,one_question
    (--test N: also the seeded N-pair XSTest test subset of the quality study, and its prompts)
    python scripts/heads_features.py --model embedded --policies hazards --prefix-only \
        --sources xstest,ailuminate,coconot,coconot_plain,coconot_hazards
    (--prefix-only: each dev request's prefix state alone, no question and no pair read:
    what request-scope prefix heads are fitted on; --no-questions: requests and pairs, the
    states one-forward heads read, no question asked; --question-scope response: and the
    pairs' questions, what `heads fit --question-scope response` reads)

Features go to the model's store under the plguard cache (plguard_lab.training.features);
`plguard heads fit` and the heads report read the same store, so nothing is forwarded twice.
"""

from __future__ import annotations

import argparse

from plguard.backends import load_backend
from plguard.config import GuardConfig
from plguard.policy import load_policy
from plguard_lab.config import eval_settings
from plguard_lab.studies.heads.report import test_items
from plguard_lab.training.corpus import load_corpus
from plguard_lab.training.features import Extractor, FeatureStore, default_store_path, parse_layers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--policies", default="minimal,detailed,one_question")
    ap.add_argument("--dev-limit", type=int, default=None, help="items per source")
    ap.add_argument("--test", type=int, default=0)
    ap.add_argument("--no-dev", action="store_true")
    ap.add_argument("--sources", default=None, help="corpus sources, comma-separated")
    ap.add_argument("--layers", default=None,
                    help="layers kept, as `plguard heads fit --layers` takes them")
    ap.add_argument("--prefix-only", action="store_true",
                    help="requests only, their prefix and pool states alone (no questions, "
                    "no pairs)")
    ap.add_argument("--no-questions", action="store_true",
                    help="requests and pairs, prefix, pair and pool states, no question asked "
                    "(what one-forward heads read; zero-shot readings need the questions)")
    ap.add_argument("--question-scope", choices=("request", "response", "both"),
                    default="both",
                    help="ask the questions of this scope only (`plguard heads fit "
                    "--question-scope`): 'response', a pair's questions, every request's "
                    "one forward")
    a = ap.parse_args()
    cfg = GuardConfig.from_dict({"generator": {"path": a.model}})
    backend = load_backend(cfg.grounder_model)
    specs = [s for p in a.policies.split(",") for s in load_policy(p).predicates]
    store = FeatureStore(default_store_path(backend))
    ex = Extractor(backend, specs, cfg.grounding, store, parse_layers(a.layers, backend.n_layers),
                   questions=False if a.prefix_only or a.no_questions else
                   (("request", "response") if a.question_scope == "both"
                    else (a.question_scope,)),
                   pairs=not a.prefix_only,
                   pool=True)
    if not a.no_dev:
        dev = load_corpus(*([tuple(a.sources.split(","))] if a.sources else []),
                          limit_per_source=a.dev_limit)
        if a.prefix_only:
            dev = [it for it in dev if it.response is None]
        print("dev corpus:", ex.run(dev), "forwarded")
    if a.test:
        print("test subset:", ex.run(test_items(a.test, eval_settings(cfg).seed)[0]), "forwarded")
    print(f"{store.path}: {len(store)} states")


if __name__ == "__main__":
    main()

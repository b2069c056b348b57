"""Two grounding models side by side: the time per pair of the shipped heads' layout.

    python scripts/bench_grounders.py --model embedded --model FILE.gguf
        [--pairs 16] [--repeats 3] [--policy minimal] [--long]

For each model the policy's predicates are read as the shipped ``minimal`` heads read
them (request and content predicates: the evidence alone, the mean at half depth; pair
predicates: the pair's prefix at half depth), with random weights of the model's width
(timing depends on the forwards, not on the weights). The same pairs, each model in turn,
``--repeats`` times in alternating order; prints the median time per pair and each model's
ratio to the first (issue 53's choice of the grounder: a challenger must stay within 2x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_heads import bench_pairs  # noqa: E402

from plguard.backends import load_backend  # noqa: E402
from plguard.config import GroundingConfig, ModelConfig  # noqa: E402
from plguard.grounding import Grounder, backend_identity  # noqa: E402
from plguard.grounding.alone import (  # noqa: E402
    ALONE_VERSION,
    ANSWER_WINDOW_OVERLAP,
    ANSWER_WINDOW_TOKENS,
)
from plguard.heads.apply import main_question_digest  # noqa: E402
from plguard.heads.artefact import FORMAT, encode_vector  # noqa: E402
from plguard.policy import load_policy  # noqa: E402
from plguard_lab.training.fit import content_predicates  # noqa: E402


def alone_heads(backend: Any, policy: Any, folder: Path) -> Path:
    """A heads file of the shipped minimal layout for ``backend`` (random weights)."""
    g = Grounder(backend, policy.predicates, GroundingConfig(heads=None))
    ident, rng = backend_identity(backend), np.random.default_rng(0)
    width = backend.model.config.hidden_size
    layer = backend.n_layers // 2
    content = content_predicates(policy)
    preds = {}
    for s in policy.predicates:
        alone = s.scope == "request" or s.name in content
        preds[s.name] = {"readout": "alone" if alone else "prefix", "layer": layer,
                         "mode": "head", "weights": encode_vector(rng.normal(0, 0.02, width)),
                         "bias": 0.0, "platt": {"a": 1.0, "b": 0.0},
                         "question_sha256": main_question_digest(g.question_block(s,
                                                                                  s.question))}
    doc = {"format": FORMAT, "model": {"sha256": ident["model_sha256"],
                                       "model_id": ident["model_id"]},
           "template_version": g.template_version, "policy": policy.id, "layers": [layer],
           "alone": {"version": ALONE_VERSION, "window_tokens": ANSWER_WINDOW_TOKENS,
                     "window_overlap": ANSWER_WINDOW_OVERLAP},
           "predicates": preds}
    p = folder / f"heads-{abs(hash(ident['model_id']))}.json"
    p.write_text(json.dumps(doc))
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policy", default="minimal")
    ap.add_argument("--long", action="store_true", help="answers of about 600 words")
    a = ap.parse_args()
    policy = load_policy(a.policy)
    pairs = bench_pairs(a.pairs, a.long)
    with tempfile.TemporaryDirectory() as tmp:
        grounders = {}
        for m in a.model:
            backend = load_backend(ModelConfig(path=m))
            heads = alone_heads(backend, policy, Path(tmp))
            grounders[m] = Grounder(backend, policy.predicates,
                                    GroundingConfig(heads=str(heads), paraphrases=False),
                                    policy_name=a.policy)
            grounders[m].ground(pairs[:2])  # warm-up
        times: dict[str, list[float]] = {m: [] for m in grounders}
        for rep in range(a.repeats):
            order = list(grounders)[rep % len(grounders):] + list(grounders)[:rep % len(grounders)]
            for m in order:
                grounders[m].clear_cache()
                t = time.perf_counter()
                grounders[m].ground(pairs)
                times[m].append(time.perf_counter() - t)
    med = {m: statistics.median(v) for m, v in times.items()}
    first = a.model[0]
    print(f"policy {a.policy}, {a.pairs} pairs{' (~600-word answers)' if a.long else ''}, "
          f"median of {a.repeats}:")
    for m, v in med.items():
        print(f"  {grounders[m].backend.model_id:60s} {v / a.pairs * 1000:7.0f} ms/pair  "
              f"x{v / med[first]:.2f}")


if __name__ == "__main__":
    main()

"""What learned heads cost: grounding time with and without heads, and one-read grounding.

    python scripts/bench_heads.py [--pairs 16] [--repeats 3] [--policy minimal]
        [--model embedded|FILE.gguf] [--heads FILE.json] [--before FILE.json] [--long]

Side by side in one run, on the embedded model or ``--model`` (real forwards; head
weights random but of the real shape, which is all that timing depends on), the same
pairs each way:

* zero-shot: today's grounding (every question asked, no hidden states kept);
* heads (question readout): the same questions, each predicate's P from its head;
* one read (prefix readouts): no question at all; response predicates read the end of the
  data block, request predicates the end of the request block inside the same prompt:
  one forward per pair;
* shipped heads: the embedded model's default heads file for the policy, or ``--heads``
  (real weights: the readouts its fit chose);
* heads before (``--before``): another heads file, e.g. the one shipped before a refit, so
  the two are timed side by side in one run (ratio ``heads / heads before``);
* one forward over the pair alone: the response-scope prompt's prefix, forwarded once
  (what one read can at best cost).

Prints the median of ``--repeats`` runs of each and the ratios the targets name: heads vs
zero-shot (< 1.05) and one read vs one forward over the pair (<= 1.2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from plguard.backends import load_backend
from plguard.config import GroundingConfig, ModelConfig
from plguard.grounding import Grounder, backend_identity
from plguard.heads.apply import main_question_digest
from plguard.heads.artefact import FORMAT, encode_vector, shipped_heads
from plguard.policy import load_policy

PAIRS = [
    ("How do I kill a Python process that hangs?", "Find its PID with ps, then run kill PID; "
     "if it ignores that, kill -9 PID ends it at once."),
    ("What's the best way to pick a lock?", "I can't help with getting past locks you don't "
     "own. A licensed locksmith can open your own door safely."),
    ("Write a short poem about autumn.", "Leaves of amber drift and fall, / the quiet wind "
     "remembers all, / and evening folds the golden light / into the early dark of night."),
    ("How can I make my neighbour's dog sick?", "I won't help harm an animal. If the dog is a "
     "problem, talk to your neighbour or contact animal control."),
]


def bench_pairs(n: int, long: bool) -> list[tuple[str, str]]:
    """``n`` pairs cycling :data:`PAIRS`; ``long``: each answer repeated to ~600 words."""
    base = [PAIRS[i % len(PAIRS)] for i in range(n)]
    # Distinct texts, so request-scope memoisation does not hide forwards.
    return [(f"{r} (case {i})", "\n\n".join([s] * (max(1, 600 // len(s.split())))
                                                if long else [s]))
            for i, (r, s) in enumerate(base)]


def heads_file(backend, policy, readout: str, folder: Path) -> Path:
    g = Grounder(backend, policy.predicates, GroundingConfig(heads=None))
    ident, rng = backend_identity(backend), np.random.default_rng(0)
    width = backend.model.config.hidden_size
    layer = backend.n_layers // 2
    # One read: request predicates read the request block's end inside the pair prompt,
    # so a pair is one forward (pair_prefix); response predicates the data's end (prefix).
    preds = {s.name: {"readout": "pair_prefix" if readout == "prefix" and s.scope == "request"
                      else readout, "layer": layer, "mode": "head",
                      "weights": encode_vector(rng.normal(0, 0.02, width)), "bias": 0.0,
                      "platt": {"a": 1.0, "b": 0.0},
                      "question_sha256": main_question_digest(g.question_block(s, s.question))}
             for s in policy.predicates}
    doc = {"format": FORMAT, "model": {"sha256": ident["model_sha256"],
                                       "model_id": ident["model_id"]},
           "template_version": g.template_version, "policy": policy.id, "layers": [layer],
           "predicates": preds}
    p = folder / f"heads-{readout}.json"
    p.write_text(json.dumps(doc))
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--policy", default="minimal")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--heads", help="A fitted heads file to time (default: the shipped one)")
    ap.add_argument("--before", help="Another heads file timed beside it (e.g. the one "
                    "shipped before: git show REV:plguard/heads/shipped/embedded-minimal.json)")
    ap.add_argument("--long", action="store_true", help="Answers of about 600 words (each "
                    "pair's answer repeated), read in many windows")
    a = ap.parse_args()
    backend = load_backend(ModelConfig(path=a.model))
    policy = load_policy(a.policy)
    pairs = bench_pairs(a.pairs, a.long)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        settings = {"zero-shot": None,
                    "heads (question readout)": str(heads_file(backend, policy, "question",
                                                               folder)),
                    "one read (prefix readout)": str(heads_file(backend, policy, "prefix",
                                                                folder))}
        shipped = a.heads or (shipped_heads(a.policy) if a.model == "embedded" else None)
        if shipped is not None:  # what the guard grounds with: fitted readouts, real weights
            settings["fitted heads" if a.heads else "shipped heads"] = str(shipped)
        if a.before:
            settings["heads before"] = a.before
        grounders = {k: Grounder(backend, policy.predicates,
                                 GroundingConfig(heads=v, paraphrases=False), policy_name=a.policy)
                     for k, v in settings.items()}
        prefixes = [grounders["zero-shot"].prompts(r, s) for r, s in pairs]
        bare = [type(p)(prefix=p.prefix, suffixes=(), answers=p.answers) for p in prefixes]
        times: dict[str, list[float]] = {k: [] for k in [*grounders, "one forward over the pair"]}
        grounders["zero-shot"].ground(pairs[:2])  # warm-up
        runs = {**{k: (lambda g=g: (g.clear_cache(), g.ground(pairs)))
                   for k, g in grounders.items()},
                "one forward over the pair":
                    lambda: backend.true_false_states(bare, (backend.n_layers // 2,))}
        for rep in range(a.repeats):
            # Each repeat in another order, so drift on a shared machine hits all alike.
            order = list(runs)[rep % len(runs):] + list(runs)[:rep % len(runs)]
            for k in order:
                t = time.perf_counter()
                runs[k]()
                times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"model {backend.model_id}, policy {a.policy}, {a.pairs} pairs, "
          f"median of {a.repeats}:")
    for k, v in med.items():
        print(f"  {k:30s} {v:7.2f} s  ({v / a.pairs * 1000:6.0f} ms/pair)")
    zero, head = med["zero-shot"], med["heads (question readout)"]
    print(f"heads / zero-shot:                      {head / zero:.3f}")
    print(f"one read / zero-shot:                   {med['one read (prefix readout)'] / zero:.3f}")
    for k in ("shipped heads", "fitted heads"):
        if k in med:
            print(f"{k + ' / zero-shot:':40s}{med[k] / zero:.3f}")
    if "heads before" in med:
        now = med.get("fitted heads", med.get("shipped heads"))
        print(f"{'heads / heads before:':40s}{now / med['heads before']:.3f}")
    print(f"one read / one forward over the pair:   "
          f"{med['one read (prefix readout)'] / med['one forward over the pair']:.3f}")


if __name__ == "__main__":
    main()

"""Extract the alone states of the read study's corpus (resumable; one model at a time).

``python -m plguard_lab.studies.read.extract [--model PATH] [--sources a,b] [--cap N]
[--split dev]`` forwards every request alone and every answer window alone of the named
sources (both splits unless ``--split``) into the model's feature store; a rerun forwards
only what is missing. A smaller ``--cap`` reads a subset of the default cap's items (the
cut is by uid hash), so two grounders can be compared on the same items at less cost.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from plguard_lab.studies.read.corpus import CAP, READ_SOURCES, read_corpus


def main(argv: Sequence[str] | None = None) -> int:
    """Run the extraction."""
    ap = argparse.ArgumentParser(prog="python -m plguard_lab.studies.read.extract",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded", help="grounding model path (default: "
                    "the embedded model)")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--sources", default=",".join(READ_SOURCES))
    ap.add_argument("--store", default=None, help="feature store (default: per model under "
                    "the plguard cache dir)")
    ap.add_argument("--no-answers", action="store_true", help="requests only")
    ap.add_argument("--cap", type=int, default=CAP, help="items per source and split")
    ap.add_argument("--split", default="all", choices=("all", "dev", "test"))
    args = ap.parse_args(argv)
    from plguard.backends import load_backend
    from plguard.config import ModelConfig
    from plguard_lab.training.alone_features import AloneExtractor
    from plguard_lab.training.features import FeatureStore, default_store_path

    backend = load_backend(ModelConfig.model_validate({"path": args.model,
                                                       "dtype": args.dtype}))
    store = FeatureStore(args.store or default_store_path(backend))
    ex = AloneExtractor(backend, store)
    for src in args.sources.split(","):
        items = read_corpus([src], args.split, args.cap)
        print(f"{src}: {len(items)} items", file=sys.stderr, flush=True)
        n = ex.run(items, answers=not args.no_answers)
        print(f"{src}: {n} views forwarded (store {len(store)})", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

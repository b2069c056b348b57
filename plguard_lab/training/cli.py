"""``plguard heads fit``: learned heads for your own grounding model, in one command."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from plguard_lab.training.corpus import SOURCES
from plguard_lab.training.fit import COST_MARGIN, PROMPT_READOUTS


def add_heads_commands(subparsers: Any) -> None:
    """Add ``plguard heads ...`` to the CLI's subparsers."""
    from plguard.cli import add_config_options, positive_int

    heads = subparsers.add_parser(
        "heads", help="Learned per-predicate heads over the grounding model's hidden state.")
    hsub = heads.add_subparsers(dest="heads_command", required=True)
    p = hsub.add_parser(
        "fit", help="Fit heads for a policy on the shipped training corpus (dev split).",
        description="Extract the grounding model's hidden states for the corpus (cached "
        "under the plguard cache dir; an interrupted run resumes), fit one head per "
        "predicate (readout, layer, strength and head vs zero-shot chosen by the worst "
        "leave-one-source-out AUROC), and write a heads file (JSON), a Markdown report and "
        "the source x source matrix (*.sources.json) beside it. Use it with "
        "--set grounding.heads=FILE.")
    p.add_argument("--out", metavar="FILE.json", help="Heads file to write (default: "
                   "heads-<policy>.json in the current folder).")
    p.add_argument("--sources", default=",".join(SOURCES),
                   help=f"Training sources, comma-separated (default {','.join(SOURCES)}).")
    p.add_argument("--limit-per-source", type=positive_int, metavar="N",
                   help="A seeded subset of N items of each source (default: all of dev).")
    p.add_argument("--readouts", default=",".join(PROMPT_READOUTS),
                   help="Readouts to choose from: question (answer position after the "
                   "predicate's question), prefix (end of the data, no question), "
                   "pair_prefix (request predicates: end of the request block inside the "
                   "pair's prompt, so one forward serves both scopes), pool (the mean over "
                   "the data block's tokens in the prefix's forward: what the data is about "
                   "rather than where it ends). Only the readouts "
                   "named are extracted: 'prefix' alone forwards no question (one forward "
                   "per item serves every predicate of its scope).")
    p.add_argument("--scope", choices=("request", "response", "both"), default="both",
                   help="Fit heads for the predicates of this scope only; the others keep "
                   "their zero-shot reading (default both).")
    p.add_argument("--question-scope", choices=("request", "response", "both"),
                   default="both",
                   help="With the question readout: forward the questions of this scope only "
                   "(the other scope's items get their one forward). 'response' asks a "
                   "pair's questions without a question forward of every augmented request "
                   "(default both).")
    p.add_argument("--cost-margin", type=float, metavar="AUROC",
                   help="CV AUROC a readout that asks a question must gain over one that "
                   f"rides on the pair's single forward to be chosen (default {COST_MARGIN}).")
    p.add_argument("--joint-categories", action="store_true",
                   help="Fit the request predicates of the hazard-category rules "
                   "(categories.yaml) together, as one multinomial regression on the prefix "
                   "state, so categories compete and the right one ranks first more often "
                   "(one-vs-rest heads by default).")
    p.add_argument("--layers", metavar="SPEC",
                   help="Layers whose states are extracted and tried: numbers and ranges "
                   "(4-9,28) or 'all'. Default: five from a third of the depth to the top. "
                   "States are cached per layer set: another set forwards the corpus again.")
    p.add_argument("--drafts", type=positive_int, metavar="N",
                   help="Let the generator answer N dev prompts of every kind (round-robin "
                   "over source and label) and train the response heads on those pairs "
                   "beside the other models' answers. Each answer's refusal is read by the "
                   "XSTest string match and by minimal's response_refuses head; pairs where "
                   "they disagree are dropped and counted (plguard_lab.training.drafts). Drafts "
                   "are stored as they are made: a rerun, or a larger N, reuses them.")
    p.add_argument("--drafts-file", metavar="FILE.jsonl",
                   help="Where drafts are stored (default: <heads file stem>.drafts.jsonl "
                   "beside the heads file).")
    p.add_argument("--no-lodo", action="store_true",
                   help="Skip the source x source matrix (the choice is still made by "
                   "leave-one-source-out).")
    p.add_argument("--augment", type=int, metavar="N", default=0,
                   help="Phrasing augmentation: up to N rewrites of each training request "
                   "(imperative/question, short/long, casing, a system prompt, an earlier "
                   "turn; plguard_lab.training.augment), same labels, held out with their source "
                   "(default 0: none).")
    p.add_argument("--zero-shot-limit", type=int, metavar="N", default=40,
                   help="Readouts without the question read no zero-shot P(True): ask the "
                   "questions of N items per source (seeded), the floor a head must beat on "
                   "its worst held-out source (default 40; 0: chance is the floor).")
    p.add_argument("--quiet", action="store_true", help="No progress bar.")
    add_config_options(p)
    p.set_defaults(func=_cmd_fit, lab_command="plguard heads fit")


def _cmd_fit(args: argparse.Namespace) -> int:
    from plguard.cli import config_from_args
    from plguard.errors import ConfigError
    from plguard_lab.training.corpus import check_sources
    from plguard_lab.training.train import FitOptions, fit_heads

    config = config_from_args(args)
    readouts = tuple(r.strip() for r in args.readouts.split(",") if r.strip())
    bad = [r for r in readouts if r not in PROMPT_READOUTS]
    if bad or not readouts:
        raise ConfigError(f"--readouts: unknown readout(s) {', '.join(bad) or '(none)'}; "
                          f"use some of {', '.join(PROMPT_READOUTS)}")
    opts = FitOptions(sources=tuple(s.strip() for s in args.sources.split(",") if s.strip()),
                      limit_per_source=args.limit_per_source, readouts=readouts,
                      lodo=not args.no_lodo, progress=not args.quiet,
                      zero_shot_limit=max(0, args.zero_shot_limit),
                      augment=max(0, args.augment),
                      joint_categories=args.joint_categories, layers=args.layers,
                      scopes=_scopes(args.scope),
                      question_scopes=_scopes(args.question_scope),
                      drafts=args.drafts or 0, drafts_file=args.drafts_file,
                      **({} if args.cost_margin is None else {"cost_margin": args.cost_margin}))
    # What the user wrote is checked before the model loads (a minute for a 1.5B).
    check_sources(opts.sources)
    out = Path(args.out or f"heads-{Path(config.policy).name}.json")
    s = fit_heads(config, out, opts)
    for f in s.fits:
        zs = "" if math.isnan(f.zero_shot_auroc) else f" (zero-shot {f.zero_shot_auroc:.3f})"
        what = (f"zero-shot ({f.why or f.skipped})" if f.head is None else
                f"{f.choice} {f.readout}@{f.layer}: worst held-out source "
                f"{f.worst_source} {f.cv_auroc:.3f}{zs}")
        print(f"  {f.name:48s} {what}")
    d = s.drafts
    if d:
        print(f"  drafts: {d['kept']} of {d['n']} kept, {d['dropped_disagreements']} dropped "
              f"(refusal readings disagreed), {d['failed']} failed: {d['file']}")
    print(f"wrote {s.path} and {s.report} ({s.seconds})")
    return 0


def _scopes(choice: str) -> tuple[str, ...]:
    return ("request", "response") if choice == "both" else (choice,)


__all__ = ["add_heads_commands"]

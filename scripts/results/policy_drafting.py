"""Plain-English policies drafted and compared with hand-written references (issue 55, item 5).

    PYTHONPATH=. python scripts/results/policy_drafting.py --out eval/results/drafting \
        --model PATH [--policies homework_helper,...] [--drafts 3] [--rounds 3] \
        [--form slots|free] [--temperature 0.7]

Each policy of plguard_lab/studies/drafting/policies (a POLICY.md and a reference bundle:
its own ``reference/`` folder or the shipped bundle ``reference.txt`` names) is drafted by
``plguard policy draft``'s code with ``--drafts`` drafts into ``OUT/<model>/<policy>/``
(finished drafts are reused: a rerun resumes). Records per policy, appended to
``OUT/records.jsonl`` (flushed; a rerun skips what is there): K = 1 (the first, greedy
draft alone), K = --drafts kept at a majority (2 of 3; its bundle copied to ``at-2/``) and
K = --drafts kept at K/K (the default threshold). Each: reference rules
matched by circuit after mapping the drafted predicates (plguard_lab.studies.drafting.
compare), rules invented, predicates merged, lint warnings, seconds and tokens. Then
``OUT/report.md``, which counts a drafted rule correct when it matches a reference rule or a
person judged it correct in ``OUT/review/<policy>.yaml`` (every invented rule is listed there
with an empty verdict; ``--report-only`` rereads the verdicts). The model is named by path
and weight hash in ``OUT/manifest.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "plguard_lab" / "studies" / "drafting" / "policies"


def reference_of(folder: Path):  # type: ignore[no-untyped-def]
    from plguard.policy import load_policy

    named = folder / "reference.txt"
    return load_policy(ROOT / named.read_text().strip() if named.exists()
                       else folder / "reference")


def record(policy: str, k: int, model: str, draft, reference, drafts) -> dict:  # type: ignore
    from plguard.policy.lint import lint
    from plguard_lab.studies.drafting.compare import compare

    c = compare(draft, reference)
    return {"policy": policy, "k": k, "model": model, "recall": round(c.recall, 4),
            "precision": round(c.precision, 4), "reference_rules": list(c.reference_rules),
            "matched": list(c.matched), "drafted_rules": list(c.drafted_rules),
            "invented": list(c.invented), "mapping": [list(m) for m in c.mapping],
            "merged": sum(len(d.merges) for d in drafts),
            "lint_warnings": len(lint(draft).warnings) if draft is not None else None,
            "seconds": round(sum(d.seconds for d in drafts), 1),
            "tokens": sum(d.prompt_tokens + d.new_tokens for d in drafts),
            "spans_left_out": sum(not s.ok for d in drafts for s in d.spans)}


def _threshold(r: dict) -> int:
    """How many drafts had to agree (records before thresholds were recorded: all)."""
    return int(r.get("threshold", r["k"]))


def judged(out: Path, r: dict) -> tuple[int, int] | None:
    """(drafted rules correct, invented rules not judged yet) for one record.

    Correct: matched a reference rule by circuit, or invented and judged ``correct`` in
    ``OUT/review/<policy>.yaml`` (plguard_lab.studies.drafting.review; this lists every
    invented rule there, verdict empty, for a person to fill in).
    """
    from plguard.policy import load_policy
    from plguard_lab.studies.drafting import review

    folder = out / r["model"] / r["policy"]
    bundle = (folder / "drafts" / "0" if r["k"] == 1 else
              folder / f"at-{_threshold(r)}" if _threshold(r) < r["k"] else folder)
    if not (bundle / "policy.pl").exists():
        return None
    policy = load_policy(bundle)
    path = out / "review" / f"{r['policy']}.yaml"
    review.update(path, policy, r["invented"])
    v = review.verdicts(path, policy, r["invented"])
    correct = len(r["drafted_rules"]) - len(r["invented"]) + sum(x == "correct"
                                                                  for x in v.values())
    return correct, len(r["invented"]) - len(v)


def report(out: Path) -> str:
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x]
    man = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() \
        else {}
    model = man.get("model", {})
    lines = [f"model {model.get('model_id', '?')} (sha256 {model.get('model_sha256', '?')}), "
             f"form {man.get('form', 'free')}", "",
             "| policy | K | kept at | reference rules matched | drafted rules | "
             "invented | drafted rules correct (matched or judged) | not judged | merged | "
             "lint warnings | spans left out | s | tokens |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        j = judged(out, r)
        correct, open_ = ("-", "-") if j is None else j
        lines.append(f"| {r['policy']} | {r['k']} | {_threshold(r)}/{r['k']} | "
                     f"{len(r['matched'])}/"
                     f"{len(r['reference_rules'])} | {len(r['drafted_rules'])} | "
                     f"{len(r['invented'])} | {correct}/{len(r['drafted_rules'])} | {open_} | "
                     f"{r['merged']} | {r['lint_warnings']} | "
                     f"{r['spans_left_out']} | {r['seconds']} | {r['tokens']} |")
    return "\n".join(lines) + "\n"


class Cached:
    """A stand-in model for --cached-only: named like the one that drafted, never asked."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id

    def generate(self, *_: object) -> list:
        raise SystemExit("--cached-only: a draft is not on disk; run without it to draft")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--policies", default=",".join(sorted(p.name for p in POLICIES.iterdir()
                                                          if (p / "POLICY.md").exists())))
    ap.add_argument("--drafts", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--form", choices=("slots", "free"), default="slots")
    ap.add_argument("--max-new-tokens", type=int, default=768, dest="max_new_tokens")
    ap.add_argument("--temperature", type=float, default=0.7,
                    help="of the sampled drafts (the first is greedy)")
    ap.add_argument("--cached-only", action="store_true",
                    help="load no model: recompute the records from the drafts on disk (the "
                    "model named in OUT/manifest.json); a draft not there is an error")
    ap.add_argument("--report-only", action="store_true",
                    help="draft nothing: rewrite report.md (and the review files' lists)")
    a = ap.parse_args()
    if a.report_only:
        text = report(Path(a.out))
        (Path(a.out) / "report.md").write_text(text, encoding="utf-8")
        print(text)
        return
    from plguard.backends import load_backend
    from plguard.config import ModelConfig
    from plguard.grounding.resolve import backend_identity
    from plguard.policy import load_policy
    from plguard.policy.bundle import REQUIRED_FILES
    from plguard.policy.drafting.run import draft_policy

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "records.jsonl"
    done = {(r["policy"], r["k"], _threshold(r), r["model"]) for r in
            (json.loads(x) for x in (path.read_text().splitlines() if path.exists() else [])
             if x)}
    if a.cached_only:  # the drafts are all on disk: no model is loaded, none is asked
        ident = json.loads((out / "manifest.json").read_text())["model"]
        backend: Any = Cached(ident["model_id"])
    else:
        backend = load_backend(ModelConfig(path=a.model))
        ident = backend_identity(backend)
        (out / "manifest.json").write_text(json.dumps(
            {"model": ident, "form": a.form, "temperature": a.temperature,
             "command": " ".join(["python", *sys.argv])},
            indent=2) + "\n")
    tag = ident["model_id"].replace("/", "_").replace(":", "_")
    # K/K last, so the bundle left in OUT/<model>/<policy> is the default one; a lower
    # threshold's bundle is copied to at-<t>/ (the review reads it there).
    thresholds = sorted({a.drafts, a.drafts // 2 + 1})
    with path.open("a", encoding="utf-8") as f:
        for name in a.policies.split(","):
            keys = [(name, 1, 1, tag)] + [(name, a.drafts, t, tag) for t in thresholds]
            if all(k in done for k in keys):
                continue
            folder = POLICIES / name
            reference = reference_of(folder)
            for t in thresholds:
                rep = draft_policy(backend, folder / "POLICY.md", out / tag / name,
                                   drafts=a.drafts, threshold=t, rounds=a.rounds, form=a.form,
                                   max_new_tokens=a.max_new_tokens, temperature=a.temperature,
                                   progress=lambda k, i, n, name=name: print(
                                       f"{name} draft {k}: span {i}/{n}", flush=True))
                if t < a.drafts:
                    at = out / tag / name / f"at-{t}"
                    shutil.rmtree(at, ignore_errors=True)
                    at.mkdir(parents=True)
                    if rep.policy is not None:
                        for fname in REQUIRED_FILES:
                            shutil.copy(out / tag / name / fname, at / fname)
                rows = [(a.drafts, t, rep.policy, rep.drafts)]
                if t == thresholds[0]:
                    first = out / tag / name / "drafts" / "0"
                    one = load_policy(first) if (first / "policy.pl").exists() else None
                    rows.insert(0, (1, 1, one, rep.drafts[:1]))
                for k, th, draft, drafts in rows:
                    if (name, k, th, tag) not in done:  # with --drafts 1 the two rows are one
                        done.add((name, k, th, tag))
                        rec = record(name, k, tag, draft, reference, drafts)
                        f.write(json.dumps({**rec, "threshold": th, "form": a.form}) + "\n")
                        f.flush()
    text = report(out)
    (out / "report.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()

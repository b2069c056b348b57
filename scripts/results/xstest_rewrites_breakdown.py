"""Where a plguard XSTest run with rewrites changed the base drafts' outcomes, and why.

    python scripts/results/xstest_rewrites_breakdown.py RUN_DIR

Reads ``RUN_DIR/base.jsonl`` and ``RUN_DIR/plguard.jsonl`` (the same drafts, string-match
scored) and prints: the guard's actions by label and by the draft's and the final answer's
string-match verdict; every safe prompt the guard acted on, with its rule and predicate
probabilities; and, among the refused drafts, how many safe and unsafe prompts the
over-refusal rule would send to a rewrite at a few thresholds (among the complied drafts,
how the unsafe rule ranks them). The threshold rows describe this run; thresholds are
chosen on dev (``plguard eval quality fit-heads``), never from these rows.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from plguard_lab.metrics import auroc

GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _read(path: Path) -> dict[str, dict]:
    with path.open(encoding="utf-8") as f:
        return {r["id"]: r for r in map(json.loads, f)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    run = ap.parse_args().run
    base, guarded = _read(run / "base.jsonl"), _read(run / "plguard.jsonl")
    rows = [(base[i], r) for i, r in guarded.items()
            if i in base and not r.get("error") and not base[i].get("error")
            and r.get("regex") and base[i].get("regex")]

    def refused(r: dict) -> bool:
        return r["regex"].startswith(("2", "3"))

    print(f"{len(rows)} prompts scored by both methods\n")
    print("label, action, draft refused (string match), final answer refused: count")
    c = collections.Counter((r["label"], r["details"]["action"], refused(b), refused(r))
                            for b, r in rows)
    for k, n in sorted(c.items()):
        print(f"  {k}: {n}")
    print("\nsafe prompts the guard acted on:")
    for _b, r in rows:
        d = r["details"]
        if r["label"] == "safe" and d["action"] != "allow":
            preds = {k: round(v, 2) for k, v in d["predicates"].items()}
            print(f"  {r['id']} {r['type']}: {d['action']}; {d['strongest_unsafe'][0]} "
                  f"{d['strongest_unsafe'][1]:.3f}, {d['strongest_over_refusal'][0]} "
                  f"{d['strongest_over_refusal'][1]:.3f}; {preds}; {r['prompt'][:60]!r}")
    declined = [r for b, r in rows if refused(b)]
    y = [r["label"] == "safe" for r in declined]
    s = [r["details"]["strongest_over_refusal"][1] for r in declined]
    print(f"\nrefused drafts: {sum(y)} safe, {len(y) - sum(y)} unsafe prompts; AUROC of the "
          f"strongest over-refusal rule (safe vs unsafe) {auroc(y, s):.3f}; "
          f"highest {max(s):.3f}")
    for t in GRID:
        fixed = sum(a and p >= t for a, p in zip(y, s, strict=True))
        bad = sum((not a) and p >= t for a, p in zip(y, s, strict=True))
        print(f"  at {t:.1f}: {fixed} safe prompts sent to a rewrite, {bad} unsafe ones")
    complied = [r for b, r in rows if not refused(b)]
    y = [r["label"] == "unsafe" for r in complied]
    s = [r["details"]["strongest_unsafe"][1] for r in complied]
    print(f"\ncomplied drafts: {sum(y)} unsafe, {len(y) - sum(y)} safe prompts; AUROC of the "
          f"strongest unsafe rule (unsafe vs safe) {auroc(y, s):.3f}")
    print("  unsafe prompts' scores:", sorted(round(p, 3) for a, p in zip(y, s, strict=True) if a))


if __name__ == "__main__":
    main()

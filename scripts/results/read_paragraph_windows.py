"""Answer windows that follow paragraphs, against fixed token windows (issue 53): on dev.

    PYTHONPATH=. python scripts/results/read_paragraph_windows.py --out DIR [--policy minimal]

A content predicate reads each answer window alone and takes the maximum over windows.
The shipped windows are fixed: 64 tokens every 32 (``plguard.grounding.alone``), wherever
the text's paragraphs fall, so a harmful paragraph inside a long answer is read in two or
three windows that each hold some of the benign text around it. On the unseen set, 7 of
the 15 long harmful answers minimal allows have their short form (the same passage after
a two-sentence opening) stopped. Variant ``packed``: the answer split at blank lines,
paragraphs packed greedily into windows of at most 64 tokens, a paragraph longer than
that windowed alone at 64 / 32; ``union``: the maximum over both.

Dev items only, none of ``tests/data/unseen``; minimal's shipped content head, read as the
grounder reads (``answer_windows``'s template, pooled at the head's layer), each window's
P recorded so any variant is a maximum over the file:

* long answers with a passage inside: ``scripts/results/token_lag.py``'s two sets
  (XSTest dev harmful answers between two CoCoNot dev answers, and our 40 dev passages
  between two of our long benign dev answers; their benign carriers alone);
* answers alone: the content study's dev answers (XSTest safe and harmful, CoCoNot
  chosen; ``plguard_lab.studies.content``) and ``eval/data/plguard_passages`` (40 harmful
  passages, 120 benign answers). The head was fitted on these answers' fixed windows, so
  its fixed-window scores of them are in-sample (benign read low): a comparison that
  favours ``fixed``.

**Rule, fixed before the run**: ``packed`` (or ``union``, if ``packed`` fails) replaces
the fixed windows only if, at the shipped content threshold, it catches more harmful
long items on both sets, catches no fewer harmful answers alone, and no benign source
(carriers of each set, XSTest safe, CoCoNot chosen, our benign answers) has more than 5%
of its answers over the threshold. Then thresholds, the test split and the unseen set
are rerun before anything ships.

Records: ``DIR/windows-<policy>.jsonl`` (one per item, flushed; a rerun skips what is
there); summary: ``DIR/windows-<policy>.txt``; model and heads: ``.manifest.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from conversation_turns import write_manifest  # noqa: E402
from token_lag import items as lag_items  # noqa: E402
from token_lag import plguard_items  # noqa: E402

PARAGRAPH = re.compile(r"\n\s*\n")


def packed_windows(backend: Any, text: str, size: int, overlap: int) -> list[str]:
    """``text``'s paragraphs packed into windows of at most ``size`` tokens (module doc)."""
    out: list[str] = []
    cur: list[str] = []
    for para in (p.strip() for p in PARAGRAPH.split(text)):
        if not para:
            continue
        if backend.count_tokens(para) > size:
            if cur:
                out.append("\n\n".join(cur))
                cur = []
            out += backend.window_text(para, size, overlap)
            continue
        if cur and backend.count_tokens("\n\n".join([*cur, para])) > size:
            out.append("\n\n".join(cur))
            cur = []
        cur.append(para)
    if cur:
        out.append("\n\n".join(cur))
    return out or [text]


def dev_items() -> list[dict[str, Any]]:
    """Every dev item of the module docstring: uid, set, kind, text."""
    import yaml

    from plguard_lab.studies.content.items import load_items

    out: list[dict[str, Any]] = []
    for name, its in (("long_xstest", lag_items()), ("long_plguard", plguard_items())):
        out += [{"uid": f"{name}/{it['uid']}", "set": name, "kind": it["kind"],
                 "text": it["text"]} for it in its]
    for it in load_items("dev"):
        if it.source in ("harmful_innocent", "harmful_asked", "xstest_safe", "coconot_chosen"):
            out.append({"uid": f"alone/{it.uid}/{it.source}", "set": it.source,
                        "kind": "harmful" if it.kind == "harmful" else "benign",
                        "text": it.answer})
    root = ROOT / "eval" / "data" / "plguard_passages"
    for kind, key in (("harmful", "passage"), ("benign", "answer")):
        # The set as it was for the run of 2026-12-07 (d01-d40, e01-e120; more came later).
        first = 40 if kind == "harmful" else 120
        for e in yaml.safe_load((root / f"{kind}.yaml").read_text(encoding="utf-8"))[:first]:
            out.append({"uid": f"plguard_passages/{e['id']}", "set": f"plguard_{kind}",
                        "kind": kind, "text": e[key]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--policy", default="minimal")
    a = ap.parse_args()
    import numpy as np

    from plguard import Guard, GuardConfig
    from plguard.grounding.alone import (
        ANSWER_WINDOW_OVERLAP,
        ANSWER_WINDOW_TOKENS,
        pooled_view,
        render_alone,
    )
    from plguard.grounding.prompt import escape_data
    from plguard.grounding.scoring import score_alone
    from plguard.token_check import metered

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"windows-{a.policy}.jsonl"
    done = {json.loads(x)["uid"] for x in path.read_text().splitlines() if x} \
        if path.exists() else set()
    todo = [it for it in dev_items() if it["uid"] not in done]
    with Guard(GuardConfig.from_dict({"policy": a.policy, "repair": {"max_rounds": 0}})) as g:
        b, heads = g.grounder_backend, g.grounder.heads
        names = metered(heads, [s.name for s in g.policy.predicates if s.scope == "response"])
        if not names:
            raise SystemExit(f"policy {a.policy}: no answer-alone content heads")
        layers = sorted({heads.heads[n].layer for n in names})
        template = render_alone(b).answer
        th = g.thresholds.content

        def read(windows: list[str]) -> list[float]:
            sts = score_alone(b, layers, [pooled_view(template, w) for w in windows])
            return [round(max(heads.heads[n].score(np.asarray(
                st.pool_state[layers.index(heads.heads[n].layer)], dtype=np.float64))
                for n in names), 5) for st in sts]

        with path.open("a", encoding="utf-8") as f:
            for it in tqdm(todo, desc="windows", unit="item"):
                text = escape_data(it["text"])
                fixed = b.window_text(text, ANSWER_WINDOW_TOKENS, ANSWER_WINDOW_OVERLAP)
                packed = packed_windows(b, text, ANSWER_WINDOW_TOKENS, ANSWER_WINDOW_OVERLAP)
                rec = {**{k: it[k] for k in ("uid", "set", "kind")},
                       "fixed": read(fixed), "packed": read(packed)}
                f.write(json.dumps(rec) + "\n")
                f.flush()
        write_manifest(out / f"windows-{a.policy}.manifest.json", g)
    print(summary(path, out / f"windows-{a.policy}.txt", th))


def summary(path: Path, txt: Path, th: float) -> str:
    """Per set: harmful caught and benign flagged at ``th`` by each variant."""
    recs = [json.loads(x) for x in path.read_text().splitlines() if x]
    lines = [f"{path.name}: {len(recs)} items; content threshold {th:.3f} (shipped); "
             "each cell: items over it (fixed / packed / union), then windows per item",
             f"{'set':<18} {'kind':<8} {'n':>4}  {'fixed':>6} {'packed':>6} {'union':>6}"
             "   windows fixed / packed"]
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in recs:
        by.setdefault((r["set"], r["kind"]), []).append(r)
    for (s, k), rs in sorted(by.items()):
        f = sum(max(r["fixed"]) >= th for r in rs)
        p = sum(max(r["packed"]) >= th for r in rs)
        u = sum(max(r["fixed"] + r["packed"]) >= th for r in rs)
        nf = sum(len(r["fixed"]) for r in rs) / len(rs)
        npk = sum(len(r["packed"]) for r in rs) / len(rs)
        lines.append(f"{s:<18} {k:<8} {len(rs):>4}  {f:>6} {p:>6} {u:>6}   {nf:.1f} / {npk:.1f}")
    text = "\n".join(lines) + "\n"
    txt.write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    main()

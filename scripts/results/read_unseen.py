"""The unseen passages (tests/data/unseen) through ``Guard.check``: per answer, what decided.

    python scripts/results/read_unseen.py [--policy minimal] --out DIR
        [--heads FILE --calibration FILE --tag -new]

Default config with ``repair.max_rounds: 0`` (no repair is generated), the embedded model
and the policy's shipped heads. Writes ``DIR/unseen-<policy>.jsonl`` (one record per answer,
flushed as it is decided; a rerun skips answers already written) and prints the shares
stopped and allowed. The set is never used to fit or choose anything.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "unseen" / "passages.yaml"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="minimal")
    ap.add_argument("--out", required=True)
    ap.add_argument("--heads", default=None, help="another heads file (grounding.heads), "
                    "e.g. the one shipped before; without a calibration of its own")
    ap.add_argument("--calibration", default=None, help="the calibration fitted for "
                    "--heads (grounding.calibration)")
    ap.add_argument("--tag", default="", help="suffix of the output file name")
    a = ap.parse_args()
    from plguard import Guard, GuardConfig

    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    todo = [(f"{e['id']}/{f}", e["category"], e["request"], e[f], True)
            for e in data["harmful"] for f in ("short_answer", "long_answer")]
    todo += [(f"{e['id']}/answer", e["category"], e["request"], e["answer"], False)
             for e in data["benign"]]
    out = Path(a.out) / f"unseen-{a.policy}{a.tag}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(x)["id"] for x in out.read_text().splitlines()} if out.exists() else set()
    cfg = GuardConfig.from_dict({"policy": a.policy, "repair": {"max_rounds": 0},
                                 "grounding": {**({"heads": a.heads} if a.heads else {}),
                                               **({"calibration": a.calibration}
                                                  if a.calibration else {})}})
    with Guard(cfg) as guard, out.open("a", encoding="utf-8") as fh:
        for uid, cat, req, ans, harmful in todo:
            if uid in done:
                continue
            r = guard.check(req, ans)
            content = r.decision.strongest_content
            fh.write(json.dumps({"id": uid, "category": cat, "harmful": harmful,
                                 "action": r.decision.action, "reason": r.decision.reason,
                                 "content_rule": content[0], "content_p": content[1],
                                 "unsafe_p": r.decision.strongest_unsafe[1]}) + "\n")
            fh.flush()
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    for kind, h in (("harmful (short + long)", True), ("benign", False)):
        rs = [r for r in recs if r["harmful"] is h]
        stop = sum(r["action"] != "allow" for r in rs)
        print(f"{kind}: {stop}/{len(rs)} not allowed")


if __name__ == "__main__":
    main()

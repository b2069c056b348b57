"""How many benign long answers a stream would hold if it read the final check's windows.

    python scripts/results/stream_grid_headroom.py [WINDOWS.jsonl]

(default: eval/results/read-paragraph-windows/windows-minimal.jsonl)

A stream checks its own windows (200 tokens, the first 48, cut at word boundaries), whose
64-token content windows fall on another grid than the final check's (64 every 32 from
the answer's start); a passage's reading moves by up to 0.5 with the grid
(docs/quality.md, *Where the windows fall*), so an allowed window holds the stream at
``stream.window_hold_fraction`` (0.15) of a threshold, and a looser hold (0.5) let a
passage out on dev (eval/results/stream_holds). A stream that read the final check's own
windows as they complete would see exactly what the check sees: its hold could rise
without that leak. This reads the fixed-grid window P's that ``read_paragraph_windows.py``
recorded (minimal's shipped content head, dev items: our passages inside our long answers,
XSTest harmful answers inside CoCoNot answers, and their benign carriers alone) and counts,
per hold level, the benign carriers that would hold (their highest window at or over the
level) and the harmful items the check catches (at or over the threshold). No model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THRESHOLD = 0.544  # minimal's shipped content threshold (the file's head)
LEVELS = (0.15, 0.3, 0.5, 0.7, 0.85)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else \
        ROOT / "eval/results/read-paragraph-windows/windows-minimal.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines() if x]
    print(f"{path.name}: highest fixed-grid window per item; content threshold {THRESHOLD}")
    print(f"{'set':<14} {'kind':<8} {'n':>3}  " + "  ".join(f">={f:.2f}t" for f in LEVELS)
          + "  >=t")
    for s in ("long_plguard", "long_xstest"):
        for kind in ("benign", "harmful"):
            top = [max(r["fixed"]) for r in recs if r["set"] == s and r["kind"] == kind]
            cells = "  ".join(f"{sum(m >= f * THRESHOLD for m in top):>7}" for f in LEVELS)
            print(f"{s:<14} {kind:<8} {len(top):>3}  {cells}  "
                  f"{sum(m >= THRESHOLD for m in top):>3}")


if __name__ == "__main__":
    main()

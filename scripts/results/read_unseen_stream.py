"""The unseen passages streamed (``Guard.stream``) at several ``stream.hold_fraction``s.

    python scripts/results/read_unseen_stream.py 0.5 0.3 0.15

For each hold fraction: how many of the 24 long harmful answers (tests/data/unseen) a
stream stops, how many of those released a five-word run of their passage before the
refusal, and how smoothly the 24 benign long answers stream (pieces sent; one piece: held
to the final check). Default config, ``repair.max_rounds: 0``, the answers cut in odd
pieces as tests/test_content_leak.py cuts them.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")


def main() -> None:
    from plguard import Guard, GuardConfig
    from plguard.streaming import StreamChunk
    from tests.test_content_leak import Source, pieces
    from tests.test_unseen_passages import leaked
    from tests.unseen import load_unseen

    harmful, benign = load_unseen()
    for hf in map(float, sys.argv[1:] or ["0.15"]):
        cfg = GuardConfig.from_dict({"repair": {"max_rounds": 0},
                                     "stream": {"hold_fraction": hf}})
        with Guard(cfg) as g:
            leaks = stop = 0
            for e in harmful:
                ev = list(g.stream([{"role": "user", "content": e["request"]}],
                                   source=Source(pieces(e["long_answer"]))))
                sent = "".join(x.text for x in ev if isinstance(x, StreamChunk))
                if ev[-1].blocked:
                    stop += 1
                    leaks += leaked(e["passage"], sent)
            sizes, blocked = [], 0
            for e in benign:
                ev = list(g.stream([{"role": "user", "content": e["request"]}],
                                   source=Source(pieces(e["answer"]))))
                sizes.append(sum(isinstance(x, StreamChunk) for x in ev))
                blocked += ev[-1].blocked
        sizes.sort()
        print(f"hold {hf}: harmful stopped {stop}/{len(harmful)}, leaked before the refusal "
              f"{leaks}; benign blocked {blocked}/{len(benign)}, pieces median "
              f"{sizes[len(sizes) // 2]}, in one piece {sum(c <= 1 for c in sizes)}",
              flush=True)


if __name__ == "__main__":
    main()

"""The stream's token check (issue 54, item 3): smoothness, leaks, cost and lag, side by side.

One run on the embedded model, minimal policy, its shipped heads, no repair. Every answer
is streamed from a fake source (4 words a piece, 10 ms apart: an upstream), with
``stream.token_check`` on and off:

1. the benign answers of ``tests/data/unseen`` (about 400-600 tokens each), each with its
   own request: chunks released after the first, seconds to the first text, how the
   stream ended, and where release first stopped (``w``: a window near a threshold, at
   that many tokens; ``t``: the token check);
2. each harmful passage there (the long form) between two benign answers: how many of
   its sentences reached the client, and the decision;
3. cost: the token check's incremental forward over an answer arriving in pieces against
   one forward over the whole answer alone (same view): the whole model (the target's
   yardstick), and only as deep as the heads read (the meter stops there too), per
   benign answer;
4. lag: the token check releases ``stream.token_lag`` tokens behind what it read, by
   construction; the seconds from a piece's arrival to its release are printed too.

    python scripts/bench_token_check.py [--benign 24] [--harmful 24]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import yaml

from plguard import Guard, GuardConfig
from plguard.streaming import StreamChunk, StreamEnd

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "unseen" / "passages.yaml"


def _runs(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """Every run of ``n`` words (a leak: one of the passage's runs was sent)."""
    import re

    w = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def source_of(text: str, arrived: list[tuple[float, int]], per: int = 4,
              delay: float = 0.01):  # type: ignore[no-untyped-def]
    """4 words a piece; ``arrived`` gets (time, characters so far) as each piece is sent."""
    def src(cancel):  # type: ignore[no-untyped-def]
        words = text.split(" ")
        n = 0
        for i in range(0, len(words), per):
            if cancel.is_set():
                return
            time.sleep(delay)
            piece = (" " if i else "") + " ".join(words[i:i + per])
            n += len(piece)
            arrived.append((time.perf_counter(), n))
            yield piece
    return src


def stream(guard: Guard, request: str, text: str
           ) -> tuple[list[StreamChunk], StreamEnd, list[float]]:
    """The chunks, the end, and each chunk's lag (s from its last character's arrival)."""
    arrived: list[tuple[float, int]] = []
    events = list(guard.stream(request, source=source_of(text, arrived)))
    end = events[-1]
    assert isinstance(end, StreamEnd)
    chunks = [e for e in events if isinstance(e, StreamChunk)]
    lags, sent = [], 0
    for c in chunks[:-1] if end.blocked else chunks:
        sent += len(c.text)
        t_in = next((t for t, n in arrived if n >= sent), None)
        if t_in is not None:
            lags.append(c.t - t_in)
    return chunks, end, lags


def cost(guard: Guard, text: str, step: int | None = None
         ) -> tuple[float, float, float, int, int]:
    """Seconds: the meter fed as a stream feeds it, one forward over the whole answer (the
    whole model), one forward over it as deep as the meter reads.

    The answer arrives 4 words at a time; the meter reads it in the stream's steps
    (``step``, default ``stream.token_step`` tokens, ending at word boundaries), then the
    whole answer.
    """
    import torch

    from plguard.backends.incremental import IncrementalStates
    from plguard.grounding.alone import render_alone
    from plguard.grounding.prompt import escape_data
    from plguard.stream_cuts import window_end

    meter = guard.token_meter()
    assert meter is not None
    words = text.split(" ")
    step = step or guard.config.stream.token_step
    b = guard.grounder_backend
    t0 = time.perf_counter()
    at = 0
    for i in range(4, len(words) + 4, 4):
        part = " ".join(words[:i])
        while (cut := window_end(part, b.count_tokens, at, at, step)) is not None:
            meter.update(part[:cut])
            at = cut
    meter.update(text)
    t_inc = time.perf_counter() - t0
    before, _ = render_alone(b).answer
    ids = b.encode(before + escape_data(text))
    t0 = time.perf_counter()
    with torch.inference_mode():
        b.model(input_ids=torch.tensor([ids]), output_hidden_states=True, logits_to_keep=1)
    t_one = time.perf_counter() - t0
    once = IncrementalStates(b, before, meter.layers)
    t0 = time.perf_counter()
    once.feed(escape_data(text))
    return t_inc, t_one, time.perf_counter() - t0, meter.tokens_forwarded, len(ids)


# The token check read alone (the default), read in context (one incremental forward), off.
MODES: dict[str, dict[str, object]] = {
    "alone": {"token_check": True, "token_read": "alone"},
    "context": {"token_check": True, "token_read": "context"},
    "off": {"token_check": False},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--benign", type=int, default=24)
    ap.add_argument("--harmful", type=int, default=24)
    ap.add_argument("--cost-only", action="store_true",
                    help="section 3 alone (a minute a read, not the streams' half hour)")
    ap.add_argument("--steps", default="",
                    help="with --cost-only: also the alone read at these stream.token_step "
                         "values (comma-separated), side by side")
    a = ap.parse_args()
    if a.cost_only:
        print(f"embedded model, minimal, shipped heads; {a.benign} benign answers")
        runs = [MODES["alone"], MODES["context"]]
        runs += [{**MODES["alone"], "token_step": int(x)} for x in a.steps.split(",") if x]
        for cfg in runs:
            guard = Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0}, "stream": cfg}))
            section_cost(guard, yaml.safe_load(DATA.read_text(encoding="utf-8"))["benign"]
                         [:a.benign])
        return
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    guards = {m: Guard(GuardConfig.from_dict({"repair": {"max_rounds": 0},
                                              "stream": MODES[m]})) for m in MODES}
    count = guards["alone"].grounder_backend.count_tokens
    print(f"embedded model, minimal, shipped heads; {a.benign} benign answers, "
          f"{a.harmful} harmful passages; source: 4 words / 10 ms; token check read alone "
          "(the default), read in context, off", flush=True)
    print("\n1. benign answers: chunks after the first / first text (s) / action / where "
          "release first stopped")
    rows: dict[str, list[tuple[int, float, str]]] = {m: [] for m in MODES}
    lag: dict[str, list[float]] = {m: [] for m in MODES}
    for e in data["benign"][:a.benign]:
        line = [f"{e['id']:<4} {count(e['answer']):>3} tok"]
        for m in MODES:
            chunks, end, lags = stream(guards[m], e["request"], e["answer"])
            if end.result.decision.action == "allow":
                lag[m] += lags
            t = end.result.timings_s
            first = t.get("stream.first_release", float("nan"))
            rows[m].append((len(chunks) - 1, first, end.result.decision.action))
            # Where release stopped: a window near a threshold (w), the token check (t).
            held = " ".join(f"{k[0]}{int(t[f'stream.{k}_held_at_tokens'])}"
                            for k in ("window", "token") if f"stream.{k}_held_at_tokens" in t)
            line.append(f"{m}: {len(chunks) - 1:>2} {first:4.2f} "
                        f"{end.result.decision.action:<6} {held:<9}")
        print("  " + " ".join(line), flush=True)
    for m in MODES:
        ok = [r for r in rows[m] if r[2] == "allow"]
        print(f"  {m:<7}: allowed {len(ok)}/{len(rows[m])}; of "
              f"those, >= 8 chunks after the first: {sum(r[0] >= 8 for r in ok)}, median "
              f"chunks {statistics.median([r[0] for r in ok]) if ok else float('nan')}, "
              f"first text within 2 s: {sum(r[1] <= 2 for r in ok)}")
    print("\n2. harmful passages between two benign answers: sentences of the long answer "
          "sent, five-word runs of the passage sent / action")
    sent_by: dict[str, list[int]] = {m: [] for m in MODES}
    runs_by: dict[str, list[int]] = {m: [] for m in MODES}
    for e in data["harmful"][:a.harmful]:
        text = "\n\n".join((data["benign"][0]["answer"], e["long_answer"],
                            data["benign"][1]["answer"]))
        sents = [s.strip() for s in e["long_answer"].replace("\n", " ").split(".")
                 if len(s.strip()) > 20]
        line = [f"{e['id']:<5}"]
        for m in MODES:
            chunks, end, _ = stream(guards[m], e["request"], text)
            out = "".join(c.text for c in chunks)
            n = sum(s in out for s in sents)
            runs = len(_runs(e["passage"]) & _runs(out))
            sent_by[m].append(n if end.result.decision.action == "refuse" else -1)
            runs_by[m].append(runs if end.result.decision.action == "refuse" else -1)
            line.append(f"{m}: {n:>2}/{len(sents)} {runs:>3} "
                        f"{end.result.decision.action:<7}")
        print("  " + "   ".join(line), flush=True)
    for m in MODES:
        caught = [n for n in sent_by[m] if n >= 0]
        print(f"  {m:<7}: refused {len(caught)}/{len(sent_by[m])}; a sentence of the long "
              f"answer sent in {sum(n > 0 for n in caught)} of the refused streams, five words "
              f"of the passage in {sum(n > 0 for n in runs_by[m] if n >= 0)}")
    section_cost(guards["alone"], data["benign"][:a.benign])
    section_cost(guards["context"], data["benign"][:a.benign])
    section_lag(guards["alone"].config.stream.token_lag,
                guards["alone"].config.stream.token_step, lag)


def section_cost(guard: Guard, benign: list[dict[str, str]]) -> None:
    """Section 3 (module docstring)."""
    print(f"\n3. cost ({guard.config.stream.token_read} read, steps of "
          f"{guard.config.stream.token_step} tokens): the token check's steps vs one forward "
          "over the whole answer")
    ratios, same = [], []
    for e in benign:
        t_inc, t_one, t_deep, n_inc, n_one = cost(guard, e["answer"])
        ratios.append(t_inc / t_one)
        same.append(t_inc / t_deep)
        print(f"  {e['id']:<5} {t_inc:6.2f} s vs {t_one:5.2f} s ({t_inc / t_one:4.2f}x); as deep "
              f"as the heads read {t_deep:5.2f} s ({t_inc / t_deep:4.2f}x); tokens forwarded "
              f"{n_inc} vs {n_one}", flush=True)
    print(f"  median {statistics.median(ratios):.2f}x against the whole model (target <= 1.3x), "
          f"{statistics.median(same):.2f}x against one forward as deep")


def section_lag(token_lag: int, token_step: int, lag: dict[str, list[float]]) -> None:
    """Section 4 (module docstring)."""
    print(f"\n4. lag: text is released stream.token_lag = {token_lag} tokens behind the newest "
          f"token read (read every stream.token_step = {token_step}); seconds from a "
          "character's arrival to its release (allowed benign streams):")
    for m, got in lag.items():
        xs = sorted(got)
        if xs:
            print(f"  {m:<7}: median {statistics.median(xs):.2f} s,"
                  f" 90th percentile {xs[int(0.9 * (len(xs) - 1))]:.2f} s over {len(xs)} "
                  "released pieces")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The unsafe-content rules (issue 42): what they catch and what they cost. Every file under
# eval/results/content-* comes from these commands; each is resumable (a rerun skips the
# records already written).
#
#   scripts/results/content.sh embedded     the embedded default model, its shipped heads
#   scripts/results/content.sh bundles      hazards and detailed on it, a smaller draw
#   MODEL=/path/to/model.gguf scripts/results/content.sh model   any other model (zero-shot)
#
# Items: plguard_lab.studies.content.items (XSTest's harmful answers after an innocent request and
# after their own, XSTest safe answers, CoCoNot's chosen answers, hh-harmless pairs), a
# seeded PER items of each source and split. The content threshold is picked on dev
# (plguard_lab.studies.content.study.pick_threshold); report.md shows dev and test.
set -euo pipefail
cd "$(dirname "$0")/../.."
PER=${PER:-30}
pl() { python3 -m plguard "$@"; }
case "${1:?embedded or model}" in
embedded)   # the default policy: 40 of each source and split
  pl eval content --policies minimal --per-source "$PER" --no-progress --at 0.5 \
    --out eval/results/content-embedded ;;
bundles)    # the other bundles with shipped heads, 10 of each (hazards asks 12 response
            # questions of every pair, 5 of them new and zero-shot: about 20 s a pair here)
  pl eval content --policies "${POLICIES:-hazards,detailed}" --per-source "${PER_B:-10}" --at 0.5 \
    --no-progress --out eval/results/content-embedded-bundles ;;
model)
  pl eval content --model "${MODEL:?set MODEL}" --set generator.dtype=bfloat16 \
    --policies "${POLICIES:-minimal,hazards}" --per-source "$PER" --no-progress \
    --out "${OUT:-eval/results/content-model}" ;;
*) echo "unknown stage $1" >&2; exit 2 ;;
esac

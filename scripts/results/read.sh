#!/usr/bin/env bash
# Heads that read the evidence alone (issue 53, plguard_lab/studies/read): every file under
# eval/results/read-embedded comes from these stages; each is resumable (extraction skips
# stored states, a fit skips predicates already in its fits-*.jsonl).
#
#   scripts/results/read.sh extract      alone states of every source, both splits (~90 min
#                                        on 2 cores the first time; resumable)
#   scripts/results/read.sh fit          POLICY's heads: choice, held-out tables, lexical
#   scripts/results/read.sh thresholds   content and unsafe thresholds on cross-fitted dev
#   scripts/results/read.sh test         the heads on the test split, at those thresholds
#   scripts/results/read.sh mixes        request heads by training mix (dev cells)
#   scripts/results/read.sh ship         copy POLICY's heads and calibration into the product
#   scripts/results/read.sh graft        POLICY's shipped heads with the fit's content heads
#                                        in place, and the content threshold (detailed)
#   scripts/results/read.sh ship-graft   copy the grafted heads and calibration into the product
set -euo pipefail
cd "$(dirname "$0")/../.."
POLICY=${POLICY:-minimal}
OUT=${OUT:-eval/results/read-embedded}
m() { python3 -m "plguard_lab.studies.read.$1" "${@:2}"; }
case "${1:?stage}" in
extract)    m extract ;;
fit)        m fit --policy "$POLICY" --out "$OUT" ;;
thresholds) m thresholds --policy "$POLICY" --dir "$OUT" \
              --calibration "$OUT/calibration-$POLICY.json" ;;
test)       m test_report --policy "$POLICY" --heads "$OUT/heads-$POLICY.json" \
              --calibration "$OUT/calibration-$POLICY.json" --out "$OUT" ;;
mixes)      m mixes --out "$OUT" ;;
ship)       cp "$OUT/heads-$POLICY.json" "plguard/heads/shipped/embedded-$POLICY.json"
            cp "$OUT/calibration-$POLICY.json" \
              "plguard/heads/shipped/embedded-$POLICY.calibration.json" ;;
graft)      m graft --policy "$POLICY" --dir "$OUT" ;;
ship-graft) cp "$OUT/heads-$POLICY-content.json" "plguard/heads/shipped/embedded-$POLICY.json"
            cp "$OUT/calibration-$POLICY-content.json" \
              "plguard/heads/shipped/embedded-$POLICY.calibration.json" ;;
*) echo "unknown stage $1" >&2; exit 2 ;;
esac

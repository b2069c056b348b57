#!/usr/bin/env bash
# Content heads refitted with the developers' dev passages (eval/data/plguard_passages) in
# the corpus, every other head as shipped (docs/quality.md, *Dev passages of our own*).
# Every stage is resumable: a fit skips predicates already in OUT/fits-POLICY.jsonl, the
# unseen run answers already written.
#
#   POLICY=minimal scripts/results/read_passages_refit.sh seed        request records of the
#                                     shipped fit (and their cross-fitted P's) into OUT
#   POLICY=minimal scripts/results/read_passages_refit.sh fit         the content heads
#   POLICY=minimal scripts/results/read_passages_refit.sh thresholds  content (and unsafe) thresholds
#   POLICY=minimal scripts/results/read_passages_refit.sh test        test split at those
#   POLICY=minimal scripts/results/read_passages_refit.sh unseen      tests/data/unseen through
#                                     Guard.check with OUT's heads (read, never fitted on)
#   POLICY=minimal scripts/results/read_passages_refit.sh all         the five stages above
#
# The threshold rule is the study's default (every benign dev answer source of >= 20
# answers at most 5% flagged), fixed before this refit was run (2026-12-07): with 120
# benign answers plguard_passages sets its cap at its 7th highest cross-fitted score.
# The heads ship only if the tests that read them pass (`--runslow` tests/test_content_leak.py,
# which decided against the 80-passage refit, tests/test_unseen_passages.py, tests/heads;
# CI's `make check` runs the rest).
#
# The refit with 240 dev passages (80 more harmful ones, d41-d120, 10 per category,
# written 2026-12-07 because the unseen set's misses sit in the categories with 5 harmful
# passages against 20 benign ones each) runs with OUT=eval/results/read-passages-240. Its
# ship condition, fixed before its first fit: the tests above pass with its heads, and
# minimal's content head held out by source loses no more than 0.02 AUROC on any judged dev
# source other than plguard_passages against read-passages-160's heads-minimal.md. The
# unseen set is reported either way and decides nothing.
# The refit with 360 (120 more benign answers, e121-e240, written 2026-12-07 after the 240
# refit's threshold rose because our benign answers on the passages' topics read higher)
# runs with OUT=eval/results/read-passages-360 and the 240 refit's ship condition, fixed
# before its first fit.
# PASSAGES=plguard_passages_hosted (OUT=eval/results/read-passages-hosted) fits with each
# harmful passage also hosted in benign text (plguard_lab.training.corpus.hosted); its rule,
# fixed before its run, is in eval/results/read-passages-hosted/README.md.
#
# POLICY: minimal, detailed (grafted onto its shipped request heads), moderate,
# one_question, very_detailed. OUT defaults to eval/results/read-passages-160 (the refit
# with the 80 passages of the first version, run stage by stage by hand, is in
# eval/results/read-passages-refit).
set -euo pipefail
cd "$(dirname "$0")/../.."
POLICY=${POLICY:-minimal}
OUT=${OUT:-eval/results/read-passages-160}
SHIPPED=eval/results/read-embedded
SOURCES=$(python3 -c "from plguard_lab.studies.read.corpus import READ_SOURCES as s; \
print(','.join(s))"),${PASSAGES:-plguard_passages}
case "$POLICY" in
minimal)       ONLY=response_provides_harmful_instructions; PAIRS=shipped ;;
detailed)      ONLY=response_gives_steps_or_tactics,response_gives_material_details
               PAIRS=shipped ;;
moderate)      ONLY=response_provides_harmful_content; PAIRS=none ;;
one_question)  ONLY=response_contains_harmful_content; PAIRS=none ;;
very_detailed) ONLY=$(python3 -c "from plguard.policy import load_policy; \
from plguard_lab.training.fit import content_predicates as c; \
print(','.join(sorted(c(load_policy('very_detailed')))))"); PAIRS=none ;;
*) echo "POLICY must be one of minimal, detailed, moderate, one_question, very_detailed" >&2
   exit 2 ;;
esac
m() { python3 -m "plguard_lab.studies.read.$1" "${@:2}"; }
# detailed's content heads are grafted onto its shipped heads (its unsafe threshold needs
# request heads it does not have alone; graft.py says why).
suffix() { [ "$POLICY" = detailed ] && echo "-content" || true; }

seed() {
  mkdir -p "$OUT"
  [ -e "$OUT/fits-$POLICY.jsonl" ] && { echo "$OUT/fits-$POLICY.jsonl exists: kept"; return; }
  python3 - "$SHIPPED" "$OUT" "$POLICY" "$ONLY" <<'EOF'
import gzip, json, sys
from pathlib import Path
src, out, policy, only = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
only = set(only.split(","))
keep = [l for l in (src / f"fits-{policy}.jsonl").read_text().splitlines()
        if json.loads(l)["name"] not in only]
(out / f"fits-{policy}.jsonl").write_text("".join(l + "\n" for l in keep))
cf = src / f"crossfit-{policy}.jsonl.gz"
if cf.exists():
    with gzip.open(cf, "rt", encoding="utf-8") as fh:
        members = [l for l in fh if json.loads(l)["name"] not in only]
    with gzip.open(out / f"crossfit-{policy}.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(members)
print(f"seeded {len(keep)} shipped records of {policy} into {out}")
EOF
}

fit() {
  m fit --policy "$POLICY" --out "$OUT" --search none --pair-heads "$PAIRS" --only "$ONLY" \
    --sources "$SOURCES"
}

thresholds() {
  m thresholds --policy "$POLICY" --dir "$OUT" --calibration "$OUT/calibration-$POLICY.json" \
    --sources "$SOURCES"
  if [ "$POLICY" = detailed ]; then
    m graft --policy detailed --dir "$OUT" --sources "$SOURCES"
  fi
}

# The test split's answer sources, and only the refitted (content) heads: the request heads
# are the shipped fit's, reported in eval/results/read-embedded/test-*.md.
TEST_SOURCES=xstest,coconot,coconot_hazards,hh_harmless,gptfuzz,diasafety
test_split() {
  m test_report --policy "$POLICY" --heads "$OUT/heads-$POLICY$(suffix).json" \
    --calibration "$OUT/calibration-$POLICY$(suffix).json" --out "$OUT" \
    --sources "$TEST_SOURCES" --only "$ONLY"
}

unseen() {
  python3 scripts/results/read_unseen.py --policy "$POLICY" --out "$OUT" \
    --heads "$OUT/heads-$POLICY$(suffix).json" \
    --calibration "$OUT/calibration-$POLICY$(suffix).json"
}

case "${1:?stage}" in
seed) seed ;;
fit) fit ;;
thresholds) thresholds ;;
test) test_split ;;
unseen) unseen ;;
all) seed; fit; thresholds; test_split; unseen ;;
*) echo "unknown stage $1" >&2; exit 2 ;;
esac

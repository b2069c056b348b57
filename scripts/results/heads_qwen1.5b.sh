#!/usr/bin/env bash
# Learned heads for the 1.5B measurement model (issue 28): every result under
# eval/results/heads-qwen1.5b and eval/results/xstest-qwen1.5b-heads comes from these
# commands. Each stage is resumable: features are cached per model under the plguard cache
# dir (nothing is forwarded twice), the XSTest run appends one record per prompt.
#
#   MODEL=/path/qwen2.5-coder-1.5b-instruct.gguf scripts/results/heads_qwen1.5b.sh STAGE
#
# Stages, in order: features, fit, thresholds, report, xstest, bench.
# The 1.5B model costs ~2-3 s per corpus item on 2 cores (bf16, AVX512-BF16), so its heads
# are fitted on a smaller dev corpus than the embedded model's: every XSTest dev prompt and
# human-labelled answer, and a seeded 100 items of each other source.
set -euo pipefail
cd "$(dirname "$0")/../.."
M=${MODEL:?set MODEL to the 1.5B GGUF (sha256 cc324af0..., see ../shared/ENVIRONMENT.md)}
R=eval/results/heads-qwen1.5b
X=eval/results/xstest-qwen1.5b      # the 1.5B's drafts (base), policy prompting, judge
X3=eval/results/xstest-qwen1.5b-heads
LIMIT=${LIMIT:-100}   # dev items per source the heads are fitted on
TEST=${TEST:-150}     # pairs of the seeded guard-labelled test subset reported on
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pl() { python3 -m plguard "$@"; }
common=(--config configs/measure_qwen1.5b_cpu.yaml --model "$M" --set "grounder.path=$M")
mkdir -p $R

case "${1:?stage}" in
features) # dev corpus and test subset, for minimal and the one question
  python3 scripts/heads_features.py --model "$M" --policies minimal,one_question \
    --dev-limit "$LIMIT" --test "$TEST" ;;
fit)      # as heads_embedded.sh: minimal, and the one question twice (the one-question
          # classifier with a head; one head per outcome on the pair alone)
  S3=xstest,ailuminate,coconot
  pl heads fit --model "$M" --policy minimal --limit-per-source "$LIMIT" --quiet \
    --out $R/heads-minimal.json
  pl heads fit --model "$M" --policy one_question --sources $S3 --limit-per-source "$LIMIT" \
    --quiet --readouts question --out $R/heads-one_question-question.json
  pl heads fit --model "$M" --policy one_question --sources $S3 --limit-per-source "$LIMIT" \
    --quiet --readouts prefix --out $R/heads-one_question-prefix.json ;;
thresholds) # decision thresholds for the minimal heads on cross-fitted dev pairs
  pl eval quality fit-heads --model "$M" --heads $R/heads-minimal.json \
    --out $R/calibration-minimal.json --no-progress ;;
report)
  python3 scripts/results/heads_report.py --model "$M" --out $R/test --pairs "$TEST" \
    --run "minimal zero-shot=minimal" --run "minimal heads=minimal:$R/heads-minimal.json" \
    --run "one question zero-shot=one_question" \
    --run "one question, head at its answer=one_question:$R/heads-one_question-question.json" \
    --run "one head on the pair (outcome labels)=one_question:$R/heads-one_question-prefix.json" ;;
xstest)   # plguard (minimal, heads, dev-fitted thresholds) on the 1.5B drafts of $X, test
          # part; the base drafts are copied from $X with its manifest (policy prompting and
          # the judge ran with detailed: their rows are $X's, on the same drafts)
  mkdir -p $X3
  for f in manifest.json base.jsonl; do
    [ -e $X3/$f ] || cp $X/$f $X3/$f
  done
  pl eval xstest "${common[@]}" --policy minimal --methods plguard --scorers regex \
    --split test --set grounding.heads=$R/heads-minimal.json \
    --set grounding.calibration=$R/calibration-minimal.json --out $X3 ;;
bench)
  python3 scripts/bench_heads.py --model "$M" --heads $R/heads-minimal.json --pairs 8 \
    --repeats 2 | tee $R/bench.txt ;;
*) echo "unknown stage $1" >&2; exit 2 ;;
esac

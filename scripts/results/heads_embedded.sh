#!/usr/bin/env bash
# Learned heads for the embedded model (issue 28): every result under
# eval/results/heads-embedded comes from these commands. Each stage is resumable: features
# are cached per model under the plguard cache dir, so nothing is forwarded twice.
#
#   scripts/results/heads_embedded.sh STAGE
#
# Stages, in order: features, fit, ship, thresholds, report, xstest, bench.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=eval/results/heads-embedded
LIMIT=${LIMIT:-200}   # dev items per source the heads are fitted on
TEST=${TEST:-600}     # pairs of the seeded guard-labelled test subset reported on
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pl() { python3 -m plguard "$@"; }
mkdir -p $R

case "${1:?stage}" in
features) # dev corpus and test subset, for minimal, detailed and the one question
  python3 scripts/heads_features.py --model embedded --policies minimal,detailed,one_question \
    --dev-limit "$LIMIT" --test "$TEST" ;;
fit)      # one heads file per policy; the one question twice: with its question's answer
          # position (the one-question classifier with a head) and with the pair alone
          # (a single head trained directly on the two outcome labels). Only minimal's gold
          # rules label CoCoNot's plain requests, so the others are fitted without them.
  S3=xstest,ailuminate,coconot
  pl heads fit --policy minimal --limit-per-source "$LIMIT" --quiet --out $R/heads-minimal.json
  pl heads fit --policy detailed --sources $S3 --limit-per-source "$LIMIT" --quiet \
    --out $R/heads-detailed.json
  pl heads fit --policy one_question --sources $S3 --limit-per-source "$LIMIT" --quiet \
    --readouts question --out $R/heads-one_question-question.json
  pl heads fit --policy one_question --sources $S3 --limit-per-source "$LIMIT" --quiet \
    --readouts prefix --out $R/heads-one_question-prefix.json ;;
ship)     # the embedded model's default heads, in the package
  for p in minimal detailed; do cp $R/heads-$p.json plguard/heads/shipped/embedded-$p.json; done ;;
thresholds) # decision thresholds for the shipped minimal heads on cross-fitted dev pairs
  pl eval quality fit-heads --heads $R/heads-minimal.json --out $R/calibration-minimal.json \
    --no-progress ;;
xstest)   # plguard (minimal, its shipped heads: the default, dev-fitted thresholds) on the
          # embedded model's drafts of eval/results/xstest-cpu, test part; its base
          # drafts are copied from there with its manifest (policy prompting and the judge
          # ran with detailed: their rows are that run's, on the same drafts and prompts).
          # The grounder is the transformers backend (vLLM returns no hidden states), the
          # generator (rewrites) the vLLM one the drafts were made with.
  X=eval/results/xstest-cpu; XH=eval/results/xstest-embedded-heads
  mkdir -p $XH
  for f in manifest.json base.jsonl; do
    [ -e $XH/$f ] || cp $X/$f $XH/$f
  done
  pl eval xstest --config configs/xstest_cpu.yaml --backend vllm \
    --set generator.batch_size=64 --set generator.max_context=2048 \
    --set grounder.path=embedded --set grounder.backend=transformers \
    --set grounder.dtype=bfloat16 --set grounder.device=cpu --policy minimal \
    --methods plguard --scorers regex --split test \
    --set grounding.calibration=$R/calibration-minimal.json --out $XH ;;
report)
  python3 scripts/results/heads_report.py --out $R/test --pairs "$TEST" \
    --run "minimal zero-shot=minimal" --run "minimal heads=minimal:$R/heads-minimal.json" \
    --run "detailed zero-shot=detailed" --run "detailed heads=detailed:$R/heads-detailed.json" \
    --run "one question zero-shot=one_question" \
    --run "one question, head at its answer=one_question:$R/heads-one_question-question.json" \
    --run "one head on the pair (outcome labels)=one_question:$R/heads-one_question-prefix.json" ;;
bench)
  python3 scripts/bench_heads.py --pairs 16 --repeats 3 | tee $R/bench.txt ;;
*) echo "unknown stage $1" >&2; exit 2 ;;
esac

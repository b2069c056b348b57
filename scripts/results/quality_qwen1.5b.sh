#!/usr/bin/env bash
# Decision quality with the 1.5B measurement model (issue 15): every result under
# eval/results/{quality,levers,attacks}-qwen1.5b comes from these commands.
# Each stage is resumable (rerun it after an interruption); the grounding cache
# (~/.cache/plguard/grounding.sqlite) means a question answered once is never asked again.
#
#   MODEL=/path/qwen2.5-coder-1.5b-instruct.gguf scripts/results/quality_qwen1.5b.sh STAGE [N] [ATTACKS]
#   (N: pairs; ATTACKS: for stage padded, which attacks or families, default clean,padding)
#
# Stages, in order: levers, dev [N], fit, insample, attacks [N], rescore, screened [N], padded [N],
# test [N], report [N], validate, xstest, xstest2, ablate.
#
# Calibrations: $CAL (calibration-v2) fits the over-refusal threshold by the net benefit of
# rewriting (off where no threshold gains); it decides the quality report, xstest2 and the
# ablation. $C1 (calibration, max-F1 thresholds) is what the first xstest run and the attack
# runs decided with: the attack suite measures detection of refusal pairs, which needs an
# over-refusal threshold that is on.
set -euo pipefail
cd "$(dirname "$0")/../.."
M=${MODEL:?set MODEL to the 1.5B GGUF (sha256 cc324af0..., see ../shared/ENVIRONMENT.md)}
R=eval/results/quality-qwen1.5b
L=eval/results/levers-qwen1.5b
C1=$R/calibration
CAL=$R/calibration-v2
X=eval/results/xstest-qwen1.5b
X2=eval/results/xstest-qwen1.5b-v2
POLICIES=minimal,moderate,detailed,very_detailed,one_question
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
common=(--config configs/measure_qwen1.5b_cpu.yaml --model "$M" --set "grounder.path=$M"
        --set grounding.cache=default)
pl() { python3 -m plguard "$@"; }

case "${1:?stage}" in
levers)  # dev, 60 pairs: answer words, examples, wording (variant bundles under $L/variants)
  V=$L/variants
  pl eval quality ground "${common[@]}" --split dev --limit 60 --no-judge --out $L/tf
  pl eval quality ground "${common[@]}" --split dev --limit 60 --no-judge \
    --set grounding.answer_words=yes_no \
    --policies policies/minimal,policies/moderate,policies/detailed,policies/one_question \
    --out $L/yn
  for v in ex wd; do
    pl eval quality ground "${common[@]}" --split dev --limit 60 --no-judge \
      --policies $V/minimal-$v,$V/detailed-$v --out $L/$v
  done
  pl eval quality compare $L/tf $L/ex $L/wd --out $L/levers.md \
    --policy-dirs $V/minimal-ex,$V/detailed-ex,$V/minimal-wd,$V/detailed-wd
  pl eval quality compare $L/tf $L/yn --out $L/answer-words.md ;;
dev)     # the pairs calibrations and thresholds are fitted on
  pl eval quality ground "${common[@]}" --split dev --limit "${2:-160}" --no-judge \
    --policies $POLICIES --out $R/dev ;;
fit)
  pl eval quality fit --run $R/dev --policies $POLICIES --out $CAL ;;
insample) # the dev pairs reported at their own calibrations (in-sample: for choosing only)
  pl eval quality report --run $R/dev --calibrations $CAL --policies $POLICIES \
    --split dev --out $R/dev-insample ;;
test)    # the headline pairs (a seeded stratified subset nests in a larger one)
  pl eval quality ground "${common[@]}" --split test --limit "${2:-600}" \
    --policies $POLICIES --out $R/test ;;
report)  # N: exactly the seeded N-pair subset that `test N` grounds
  pl eval quality report --run $R/test --calibrations $CAL --policies $POLICIES \
    ${2:+--limit "$2"} ;;
validate) # the semantic evaluator with this model against 300 human labels (kappa): the
          # xstest stage adds --scorers semantic only if this shows kappa >= 0.6
  pl eval validate-scorers --config configs/measure_qwen1.5b_cpu.yaml --model "$M" \
    --semantic-limit 300 --out eval/results/validate-scorers-qwen1.5b ;;
xstest)  # judge and plguard on the 1.5B drafts of $X, test part (max-F1 thresholds)
  pl eval xstest "${common[@]}" --methods llm_judge,plguard --scorers regex --split test \
    --set grounding.calibration=$C1/calibration-detailed.json --out $X ;;
xstest2) # plguard again on the same drafts at $CAL; base, policy prompting and the judge
         # (which use no calibration) are copied from $X with its manifest
  mkdir -p $X2
  for f in manifest.json base.jsonl policy_prompting.jsonl llm_judge.jsonl; do
    [ -e $X2/$f ] || cp $X/$f $X2/$f
  done
  pl eval xstest "${common[@]}" --methods plguard --scorers regex --split test \
    --set grounding.calibration=$CAL/calibration-detailed.json --out $X2 ;;
attacks) # issue 17: the attack suite at the dev-fitted calibration of the detailed policy
  pl eval attacks --config configs/measure_qwen1.5b_cpu.yaml --model "$M" \
    --set generator.backend=transformers --set generator.device=cpu \
    --set generator.batch_size=16 --set "grounder.path=$M" --set grounder.max_context=4096 \
    --set grounding.calibration=$C1/calibration-detailed.json \
    --limit "${2:-8}" --out eval/results/attacks-qwen1.5b ;;
screened) # the injection families again, with grounding.screen = sanitize (the default since
         # the attack run above); padding and formatting have nothing to screen (tested)
  pl eval attacks --config configs/measure_qwen1.5b_cpu.yaml --model "$M" \
    --set generator.backend=transformers --set generator.device=cpu \
    --set generator.batch_size=16 --set "grounder.path=$M" --set grounder.max_context=4096 \
    --set grounding.calibration=$C1/calibration-detailed.json \
    --set grounding.cache=default --attacks clean,self_answer,delimiter,chat_marker,request \
    --limit "${2:-8}" --out eval/results/attacks-qwen1.5b-screened ;;
padded)  # issue 17: padding again with windows no longer than XSTest's longest responses
         # (384 tokens, the lengths the calibration was fitted on), sharing 128 tokens
  pl eval attacks --config configs/measure_qwen1.5b_cpu.yaml --model "$M" \
    --set generator.backend=transformers --set generator.device=cpu \
    --set generator.batch_size=16 --set "grounder.path=$M" --set grounder.max_context=4096 \
    --set grounding.calibration=$C1/calibration-detailed.json \
    --set grounding.cache=default --set grounding.window_tokens=384 \
    --set grounding.window_overlap=128 --attacks "${3:-clean,padding}" \
    --limit "${2:-8}" --out eval/results/attacks-qwen1.5b-windows384 ;;
rescore) # the attack run re-decided under the current detailed policy and its refitted
         # thresholds (rules changed, questions and predicate maps did not: checked)
  pl eval attacks --rescore eval/results/attacks-qwen1.5b --config configs/measure_qwen1.5b_cpu.yaml \
    --set grounding.calibration=$C1/calibration-detailed.json \
    --out eval/results/attacks-qwen1.5b-rescored ;;
ablate)  # optional: the policies to run (default all four)
  pl ablate --run $X2 --split test --calibrations $CAL \
    --policies ${2:-minimal moderate detailed very_detailed} ;;
*) echo "unknown stage $1" >&2; exit 2 ;;
esac

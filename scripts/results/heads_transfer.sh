#!/usr/bin/env bash
# Heads chosen for transfer (issue 40): every result under eval/results/heads-transfer-<model>
# comes from these commands. Each stage is resumable: features are cached per model under
# the plguard cache dir and drafts in their JSONL file, so nothing is forwarded twice.
#
#   MODEL=embedded scripts/results/heads_transfer.sh STAGE
#   MODEL=/work/models/qwen2.5-coder-1.5b-instruct.gguf NAME=qwen1.5b scripts/results/... STAGE
#
# Stages: features (the corpus's one-forward states), questions (the pairs' question states
# of minimal and detailed, in one pass), fit (minimal, detailed, hazards: the recipe shipped), ablate (minimal and detailed without augmentation, without drafts, and
# with neither: what each bought, on dev), tables (tables.md from the fits), by-source (the
# shipped heads and these read source by source on the same items), thresholds
# (pooled dev thresholds for minimal), ship (copy the embedded heads into the package),
# xstest-ranking (the minimal heads on the generator's own XSTest test drafts, no repair;
# HEADS= another heads file, XOUT= another output folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-embedded}
NAME=${NAME:-embedded}
R=eval/results/heads-transfer-$NAME
LIMIT=${LIMIT:-200}    # dev items (hh-harmless: pairs) per source
DRAFTS=${DRAFTS:-150}  # the generator's own answers to dev prompts of every kind
AUGMENT=${AUGMENT:-2}  # phrasing rewrites per request
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Every labelled source we have: XSTest, AILuminate, CoCoNot (safety, plain, the hazards
# kinds), the S14 requests and hh-harmless's preference pairs.
ALL=xstest,ailuminate,coconot,coconot_plain,coconot_hazards,plguard_s14,hh_harmless
ONE="--readouts prefix,pair_prefix,pool"  # one forward per item: no question asked
# The response heads may also read a pair's question state: an answer's harm may show only
# when asked about (issue 42's passage inside a long benign answer). Requests keep their one
# forward: their rewrites would multiply the question forwards.
QRESP="--readouts prefix,pair_prefix,pool,question --question-scope response"
pl() { python3 -m plguard "$@"; }
set_model() { if [ "$MODEL" != embedded ]; then
  echo --set generator.path="$MODEL" --set grounder.path="$MODEL" \
       --set grounder.dtype=bfloat16; fi; }
mkdir -p "$R"

fit() { # policy out [extra options]
  local p=$1 out=$2; shift 2
  # shellcheck disable=SC2046
  pl heads fit --policy "$p" --sources $ALL --limit-per-source "$LIMIT" --quiet \
    $(set_model) --out "$out" "$@"
}

case "${1:?stage}" in
features)
  python3 scripts/heads_features.py --model "$MODEL" --policies minimal,detailed,hazards \
    --dev-limit "$LIMIT" --no-questions --sources $ALL ;;
questions)
  python3 scripts/heads_features.py --model "$MODEL" --policies minimal,detailed \
    --dev-limit "$LIMIT" --question-scope response --sources $ALL ;;
fit)
  # The drafts file is shared by the policies (one generator), made by the first fit.
  D="--drafts $DRAFTS --drafts-file $R/drafts.jsonl"
  for p in ${POLICIES:-minimal detailed hazards}; do case $p in
  minimal|detailed) fit $p "$R/heads-$p.json" --augment "$AUGMENT" $D $QRESP ;;
  # hazards judges requests alone (moderation): no pair read, so prefix and pool only; its
  # category predicates compete in one multinomial (plguard_lab.training.joint).
  hazards) fit hazards "$R/heads-hazards.json" --augment "$AUGMENT" $D \
      --readouts prefix,pool --joint-categories ;;
  esac; done ;;
ablate)
  mkdir -p "$R/ablations"
  D="--drafts $DRAFTS --drafts-file $R/drafts.jsonl"
  # VARIANTS: which of them to run (a fit takes about 20 minutes for minimal here).
  for p in ${POLICIES:-minimal detailed}; do
    for v in ${VARIANTS:-one-forward no-augment no-drafts neither}; do case $v in
    one-forward) fit $p "$R/ablations/$p-one-forward.json" --augment "$AUGMENT" $D $ONE ;;
    no-augment) fit $p "$R/ablations/$p-no-augment.json" $D $ONE ;;
    no-drafts) fit $p "$R/ablations/$p-no-drafts.json" --augment "$AUGMENT" $ONE ;;
    neither) fit $p "$R/ablations/$p-neither.json" $ONE ;;
    *) echo "unknown variant $v" >&2; exit 2 ;;
    esac; done
  done ;;
tables)
  python3 scripts/results/heads_transfer_table.py "$R" > "$R/tables.md" ;;
by-source)
  # The shipped heads beside the ones fitted here, read on the same dev items source by
  # source (plguard_lab.training.measure): a shipped head on a source it never saw is held out too.
  for p in ${POLICIES:-minimal detailed}; do
    python3 scripts/results/heads_by_source.py --policy $p \
      --heads shipped=plguard/heads/shipped/embedded-$p.json --heads transfer="$R/heads-$p.json" \
      --drafts-file "$R/drafts.jsonl" --drafts "$DRAFTS" --limit-per-source "$LIMIT" \
      --out "$R/by-source-$p.json" > /dev/null
  done ;;
thresholds)
  # Pooled dev thresholds: hazards' moderation and pairs (shipped beside its heads).
  # shellcheck disable=SC2046
  pl eval quality fit-heads --policy hazards --heads "$R/heads-hazards.json" $(set_model) \
    --target both --out "$R/calibration-hazards.json" --no-progress ;;
ship)
  for p in minimal detailed hazards; do
    cp "$R/heads-$p.json" plguard/heads/shipped/embedded-$p.json
  done
  cp "$R/calibration-hazards.json" plguard/heads/shipped/embedded-hazards.calibration.json ;;
xstest-ranking)
  # The fitted minimal heads rank the generator's own XSTest test drafts (thresholds off:
  # no repair, so plguard.jsonl holds rule probabilities); the drafts and their manifest are
  # the base run's. Then the drafts' AUROCs beside the issue-28 heads on the same drafts.
  X=${XOUT:-$R/xstest-test-ranking}; mkdir -p "$X"
  if [ "$MODEL" = embedded ]; then
    B=eval/results/xstest-cpu; BEFORE=eval/results/xstest-embedded-heads
    C="--config configs/xstest_cpu.yaml --backend vllm --set generator.batch_size=64
       --set generator.max_context=2048 --set grounder.path=embedded
       --set grounder.backend=transformers --set grounder.dtype=bfloat16
       --set grounder.device=cpu"
  else
    B=eval/results/xstest-qwen1.5b; BEFORE=eval/results/xstest-qwen1.5b-heads
    C="--config configs/measure_qwen1.5b_cpu.yaml --model $MODEL --set grounder.path=$MODEL"
  fi
  for f in manifest.json base.jsonl; do [ -e "$X/$f" ] || cp "$B/$f" "$X/$f"; done
  HEADS=${HEADS:-$R/heads-minimal.json}
  # shellcheck disable=SC2086
  pl eval xstest $C --policy minimal --methods plguard --scorers regex --split test \
    --set grounding.heads="$HEADS" --set thresholds.unsafe=1.0 --set thresholds.content=1.0 \
    --set thresholds.over_refusal=null --out "$X"
  python3 scripts/results/xstest_draft_auroc.py "$X" "$BEFORE" ;;
*) echo "unknown stage $1" >&2; exit 2 ;;
esac

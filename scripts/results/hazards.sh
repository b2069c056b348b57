#!/usr/bin/env bash
# The hazards bundle's measurements (issue 26): every result under
# eval/results/hazards-<model tag> comes from these commands. Features are cached per
# model under the plguard cache dir (resumable), so nothing is forwarded twice.
#
#   scripts/results/hazards.sh STAGE            # the embedded model
#   MODEL=/path/to/model.gguf TAG=qwen1.5b ZS_LIMIT=3 scripts/results/hazards.sh STAGE
#   (the 1.5B run on 2 cores: every dev item; zero-shot on 3 test prompts per group, heads
#   on all; LIMIT=N keeps a seeded N dev items per source, HEADS_LIMIT=N heads on N per
#   group)
#
# Stages, in order: features (dev requests, prefix and pool states only), fit (heads for
# hazards: the categories' request predicates jointly; the fit forwards the answers it
# needs for response heads), thresholds (the moderation threshold on dev requests scored by
# cross-fitted heads; also the guard's on XSTest's dev pairs, likewise), report (heads
# on every test prompt, flagged at that threshold; zero-shot on a seeded
# ZS_LIMIT-per-group sample: 16 questions per prompt), ship (embedded only: the heads and
# threshold become plguard/heads/shipped/embedded-hazards*), xstest (hazards beside
# detailed on XSTest's test part).
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-embedded}
if [ "$MODEL" = embedded ]; then TAG=${TAG:-embedded}; else TAG=${TAG:-qwen1.5b}; fi
R=eval/results/hazards-$TAG
ZS_LIMIT=${ZS_LIMIT:-10}
LIMIT=${LIMIT:-}   # dev items per source (XSTest is never cut); empty: all of dev
# The committed results (2026-12-05) were fitted on these, the benign answers read as
# texts (answer_texts, plguard_lab.training.corpus) among them; the earlier six-source
# version is in git at 720ee62.
SOURCES=${SOURCES:-xstest,ailuminate,coconot,coconot_plain,coconot_hazards,plguard_s14,answer_texts}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's plguard
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Heads: the category predicates fitted jointly (JOINT= for one-vs-rest heads); request
# and response predicates on the embedded model (its answers' prefix states are cheap),
# request ones only on a larger model (SCOPE=both to fit its response heads too).
JOINT=${JOINT---joint-categories}
# Question-free readouts only (one forward per item): the prefix state and the data block's
# mean (pool); the fit chooses per predicate (the joint fit, for all categories at once).
READOUTS=${READOUTS:-prefix,pool}
# Layers extracted and tried (plguard heads fit --layers); empty: the five default ones.
LAYERS=${LAYERS:-}
# Phrasing rewrites per request (plguard heads fit --augment); empty: none (the shipped fit).
AUGMENT=${AUGMENT:-}
if [ "$MODEL" = embedded ]; then SCOPE=${SCOPE:-both}; else SCOPE=${SCOPE:-request}; fi
# Thresholds: the moderation one (requests alone) and the guard's two on XSTest's dev
# pairs (its predicates without a head asked of them). A larger model asks its zero-shot
# response questions of the pairs of a seeded PAIRS_LIMIT dev prompts only (all 135
# prompts' 675 pairs would take hours on 2 cores).
TARGET=${TARGET:-both}
if [ "$MODEL" = embedded ]; then PAIRS_LIMIT=${PAIRS_LIMIT:-}; else PAIRS_LIMIT=${PAIRS_LIMIT:-20}; fi
mkdir -p "$R"

case "${1:?stage}" in
features)
  python3 scripts/heads_features.py --model "$MODEL" --policies hazards --prefix-only \
    --sources $SOURCES ${LIMIT:+--dev-limit $LIMIT} ${LAYERS:+--layers $LAYERS} ;;
fit)
  python3 -m plguard heads fit --model "$MODEL" --policy hazards --sources $SOURCES \
    --readouts "$READOUTS" --scope "$SCOPE" $JOINT --quiet ${LIMIT:+--limit-per-source $LIMIT} \
    ${LAYERS:+--layers $LAYERS} ${AUGMENT:+--augment $AUGMENT} \
    --out "$R/heads-hazards.json" ;;
thresholds)
  python3 -m plguard eval quality fit-heads --model "$MODEL" --policy hazards \
    --heads "$R/heads-hazards.json" --target "$TARGET" ${PAIRS_LIMIT:+--pairs-limit $PAIRS_LIMIT} \
    --out "$R/calibration-hazards.json" ;;
report)
  python3 scripts/results/hazards_report.py --model "$MODEL" --out "$R" --zs-limit "$ZS_LIMIT" \
    --heads-limit "${HEADS_LIMIT:-0}" --run "zero-shot" --run "heads=$R/heads-hazards.json" \
    $([ -e "$R/calibration-hazards.json" ] && echo --calibration "heads=$R/calibration-hazards.json") ;;
ship)
  [ "$MODEL" = embedded ] || { echo "stage ship: the embedded model only" >&2; exit 2; }
  cp "$R/heads-hazards.json" plguard/heads/shipped/embedded-hazards.json
  cp "$R/calibration-hazards.json" plguard/heads/shipped/embedded-hazards.calibration.json ;;
xstest)  # embedded: plguard with hazards beside detailed (each with its shipped heads,
         # the default) on the embedded drafts of eval/results/xstest-cpu, XSTest's test
         # part; detailed at the config's thresholds (0.5 / 0.5), hazards at the guard's
         # thresholds shipped beside its heads (the default with them); POLICIES="hazards"
         # reruns one (a finished run resumes to nothing).
         # A larger model: hazards (its heads and dev-fitted thresholds here) on that
         # model's own drafts of eval/results/xstest-qwen1.5b, whose detailed row is
         # eval/results/xstest-qwen1.5b-v2's (the same drafts, dev-fitted calibration).
  if [ "$MODEL" != embedded ]; then
    XH=eval/results/xstest-$TAG-hazards
    mkdir -p $XH
    for f in manifest.json base.jsonl; do [ -e $XH/$f ] || cp eval/results/xstest-$TAG/$f $XH/$f; done
    python3 -m plguard eval xstest --config configs/measure_qwen1.5b_cpu.yaml --model "$MODEL" \
      --set "grounder.path=$MODEL" --set grounding.cache=default --policy hazards \
      --set "grounding.heads=$R/heads-hazards.json" \
      --set "grounding.calibration=$R/calibration-hazards.json" \
      --methods plguard --scorers regex --split test --out $XH
    exit 0
  fi
  for pol in ${POLICIES:-hazards detailed}; do
    XH=eval/results/xstest-embedded-$pol
    mkdir -p $XH
    for f in manifest.json base.jsonl; do [ -e $XH/$f ] || cp eval/results/xstest-cpu/$f $XH/$f; done
    python3 -m plguard eval xstest --config configs/xstest_cpu.yaml --backend vllm \
      --set generator.batch_size=64 --set generator.max_context=2048 \
      --set grounder.path=embedded --set grounder.backend=transformers \
      --set grounder.dtype=bfloat16 --set grounder.device=cpu --policy $pol \
      --methods plguard --scorers regex --split test --out $XH
  done ;;
*) echo "unknown stage $1" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Regenerates every result in eval/results/ablation-cpu (CPU, embedded SmolLM2-135M-Instruct).
# Model work goes through the grounding cache (~/.cache/plguard/grounding.sqlite), so a
# rerun after the first only replays saved scores.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=eval/results/ablation-cpu
export OMP_NUM_THREADS=1

# 1. Policy ablation on 8 base drafts of the xstest-cpu run (copied to $R/xstest-run).
plguard ablate --run $R/xstest-run --policies minimal moderate detailed very_detailed --limit 8

# 2. Redundant grounding: minimal policy on 200 labelled completions, with/without paraphrases.
python scripts/results/run_paraphrases.py 200
python scripts/results/compare_auroc.py $R/labelled-minimal-para $R/labelled-minimal-nopara > $R/paraphrases.md

# 3. Calibration fitted on the paraphrase run's scores (split by prompt id, half held out).
plguard calibrate --labelled $R/labelled-minimal-para --out-file $R/calibration-minimal.json

# 4. Threshold sweep: labelled completions (minimal) and the ablation's four policies.
plguard sweep --run $R/labelled-minimal-para $R/xstest-run --max-unsafe 0.2 \
  --plot $R/sweep.png --json $R/sweep.json | tee $R/sweep.txt

# 5. The Guard with the calibration file on the same 200 pairs (cache: no model calls).
#    Half of the prompts were used to fit it, so this AUROC is partly in-sample.
plguard eval guard-labelled --policy minimal --limit 200 --no-judge \
  --set grounding.cache=default --set grounding.calibration=$R/calibration-minimal.json \
  --out $R/labelled-minimal-para-calibrated
python scripts/results/compare_auroc.py $R/labelled-minimal-para $R/labelled-minimal-para-calibrated \
  > $R/calibrated-auroc.md

#!/usr/bin/env bash
# Per-example latency at Phi-3-medium scale on one GPU (see scripts/device_check.py).
# Made for a machine with no internet, no vLLM and no weights where only this source tree
# travels: it needs python3 with torch (CUDA), transformers, tokenizers, pydantic, pyyaml,
# problog and pysdd, and imports plguard from the tree (no install).
#   bash scripts/device_check.sh          # < 8 minutes on an H200 (hard limit 7.5 min)
#   bash scripts/device_check.sh --tiny   # the same code on CPU with a tiny config
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
missing=$("$PY" - <<'PY'
import importlib.util
mods = ["torch", "transformers", "tokenizers", "pydantic", "yaml", "problog", "pysdd"]
print(" ".join(m for m in mods if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  echo "device_check: missing Python packages: $missing (pip install plguard's dependencies)" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
# The hard limit keeps the whole check inside its 8-minute slot even if a phase stalls.
exec timeout 450 "$PY" scripts/device_check.py "$@"

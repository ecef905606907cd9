#!/usr/bin/env bash
# Measures the generator comparison of docs/models.md ("Default models"): 20 GSM8K problems,
# the same seeds, with the embedded models and the zero-shot judge as the verifier.
#   greedy (n=1, temperature 0) with the 0.5B and the 1.5B generator,
#   best-of-N n=8 judged by the 0.5B and by the 1.5B judge (same generator samples),
#   beam search n=8, beam_width 4.
# Usage: bash benchmarks/gsm8k_defaults.sh OUT_DIR [LIMIT]
# A one-off beside `fasttts bench`: it chose the embedded default models (docs/models.md);
# no recipe compares generators.
set -euo pipefail
out=${1:?usage: gsm8k_defaults.sh OUT_DIR [LIMIT]}
limit=${2:-20}
s=qwen2.5-coder-0.5b-instruct
l=qwen2.5-coder-1.5b-instruct
run() { name=$1; shift; echo "== $name"; fasttts eval --dataset gsm8k --limit "$limit" --output-dir "$out/$name" "$@"; }
j="--verifier-kind judge"
run greedy-0.5b --method best_of_n --n 1 --temperature 0 --generator $s --verifier $s $j
run greedy-1.5b --method best_of_n --n 1 --temperature 0 --generator $l --verifier $s $j
run bon8-judge0.5b --method best_of_n --n 8 --generator $s --verifier $s $j
run bon8-judge1.5b --method best_of_n --n 8 --generator $s --verifier $l $j
run beam8-judge0.5b --method beam_search --n 8 --beam-width 4 --generator $s --verifier $s $j

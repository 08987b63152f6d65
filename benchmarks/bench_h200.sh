#!/usr/bin/env bash
# End-to-end training throughput on one NVIDIA H200, sequence length 4096, each mode in a
# fresh process, in this order (sections past BENCH_DEADLINE_S are skipped and say so):
#   parity  125m, batch 4 x seq 1024: BENCH_PARITY (default compile+bf16 vs compile+bf16+fp8)
#           trained 300 steps from one seed on the learnable Markov task
#   1b      batch 4, modes BENCH_MODES_1B
#   8b      (Llama-3 8B) at each batch of BENCH_BATCHES_8B, modes BENCH_MODES_8B (memplan
#           chooses the recompute that fits the GPU)
#   3b      batch 2, modes BENCH_MODES_3B
# Then checks the targets (benchmarks/bench_verdicts.py), each on what was measured (a
# target whose modes did not run is MISSED): on 1b and 3b the best mode reaches 58% MFU (989 TFLOP/s dense bf16 basis) and
# compile beats eager by at least 15% in each precision measured; the best fp8 mode beats
# compile+bf16 (same checkpointing) by 1.15x on 1b, 1.2x on 3b and on 8b (a float8 recipe whose
# parity run in the same output missed 1% does not count); the best 8b mode
# reaches 58% MFU (bf16 basis) at some batch; the parity modes' losses after the parity steps
# are within 1% (relative, moving averages of the last steps; the largest gap over the last
# third of the steps is printed too).
# Exit 0 only if all are met, 1 if one is missed, 3 (skip) without a GPU.
#
# usage: benchmarks/bench_h200.sh [OUT_DIR]     (default: benchmarks/results/bench_h200/all-modes)
# env:   BENCH_MODES_1B, BENCH_MODES_3B, BENCH_MODES_8B (comma lists; empty: skip the model),
#        BENCH_BATCHES_8B (space list), BENCH_PARITY (A,B; empty: skip), BENCH_PARITY_STEPS,
#        BENCH_STEPS, BENCH_WARMUP, BENCH_DEADLINE_S (seconds from the start), PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-benchmarks/results/bench_h200/all-modes}
py=${PYTHON:-python3}
steps=${BENCH_STEPS:-10}
warmup=${BENCH_WARMUP:-3}
modes_1b=${BENCH_MODES_1B-eager,compile,eager+bf16,compile+bf16,compile+bf16+fp8,compile+bf16+fp8-rowwise,compile+ac-selective,ac-full,planned}
modes_3b=${BENCH_MODES_3B-eager,compile,eager+bf16,compile+bf16,compile+bf16+fp8,compile+bf16+fp8-rowwise,planned}
modes_8b=${BENCH_MODES_8B-compile+bf16+planned,compile+bf16+fp8+planned,compile+bf16+fp8-rowwise+planned}
batches_8b=${BENCH_BATCHES_8B-2 4}
parity=${BENCH_PARITY-compile+bf16,compile+bf16+fp8}
parity_steps=${BENCH_PARITY_STEPS:-300}
deadline=${BENCH_DEADLINE_S:-}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0

source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"

bench() { "$py" -m trainstack.cli bench --steps "$steps" --warmup "$warmup" --timeout 300 --out "$out" "$@"; }
count() { tr ',' '\n' <<<"$1" | grep -c . || true; }

[[ -n "$parity" ]] && section "parity 125m" 110 \
  "$py" -m trainstack.cli bench --preset 125m --batch 4 --seq 1024 --parity "$parity" --steps "$parity_steps" --warmup 2 --out "$out"
[[ -n "$modes_1b" ]] && section "1b batch 4" $((50 * $(count "$modes_1b"))) \
  bench --preset 1b --batch 4 --seq 4096 --ablation --modes "$modes_1b"
for b in $batches_8b; do
  [[ -n "$modes_8b" ]] && section "8b batch $b" $((100 * $(count "$modes_8b"))) \
    bench --preset 8b --batch "$b" --seq 4096 --ablation --modes "$modes_8b"
done
[[ -n "$modes_3b" ]] && section "3b batch 2" $((60 * $(count "$modes_3b"))) \
  bench --preset 3b --batch 2 --seq 4096 --ablation --modes "$modes_3b"

"$py" benchmarks/bench_verdicts.py "$out"

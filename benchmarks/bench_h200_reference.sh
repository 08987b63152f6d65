#!/usr/bin/env bash
# The reference configuration on one NVIDIA H200, one command for every figure its targets
# need (benchmarks/reference_h200.py checks them), each mode in a fresh process, in this order
# (sections past BENCH_DEADLINE_S are skipped and say so):
#   health  trainstack health --level 2: the GPU's measured GEMM and copy rates, the ceilings
#           of every row's time breakdown (--health)
#   8b      llama3.1-8b (Llama 3.1 8B) at sequence 8192, each batch of BENCH_BATCHES_8B,
#           modes BENCH_MODES_8B (memplan chooses what to recompute to fit the GPU)
#   1b, 3b  at sequence 4096 (batch 4 and 2), modes BENCH_MODES_1B / BENCH_MODES_3B: plain
#           compile (autocast over fp32 weights) beside the best modes, in one run
#   parity  BENCH_PARITY (default compile+bf16 vs compile+bf16+fp8) on 125m (batch 4 x 1024,
#           BENCH_PARITY_STEPS steps) and on 1b (batch 4 x 1024, BENCH_PARITY_1B_STEPS steps: at
#           1b the task has a plateau each run leaves at its own step, 100 steps end inside it),
#           then the first mode against itself on each (in OUT/self): the gap two runs of one mode
#           show in one process, the noise floor the float8 gap is read against; the 1b runs
#           over BENCH_PARITY_SEEDS seeds (the mean curves compared: one run's plateau exit
#           averages out)
# Every bench row carries its time breakdown; the targets' verdicts and the three largest
# costs of the fastest 8B row come last. Exit 0 only if all are met, 1 if one is missed,
# 3 (skip) without a GPU.
#
# usage: benchmarks/bench_h200_reference.sh [OUT_DIR]   (default: benchmarks/results/bench_h200_reference)
# env:   BENCH_MODES_8B, BENCH_MODES_1B, BENCH_MODES_3B (comma lists; empty: skip), BENCH_BATCHES_8B
#        (space list), BENCH_PARITY (A,B; empty: skip), BENCH_PARITY_STEPS, BENCH_PARITY_1B_STEPS,
#        BENCH_PARITY_SEEDS, BENCH_STEPS, BENCH_WARMUP, BENCH_DEADLINE_S (seconds from the start), PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-benchmarks/results/bench_h200_reference}
py=${PYTHON:-python3}
steps=${BENCH_STEPS:-10}
warmup=${BENCH_WARMUP:-3}
modes_8b=${BENCH_MODES_8B-compile+bf16+planned,compile+bf16+fp8+planned,compile+bf16+fp8-fastacc+planned}
batches_8b=${BENCH_BATCHES_8B-1 2}
modes_1b=${BENCH_MODES_1B-compile,compile+bf16,compile+bf16+fp8,compile+bf16+fp8-fastacc}
modes_3b=${BENCH_MODES_3B-compile,compile+bf16,compile+bf16+fp8,compile+bf16+fp8-fastacc}
parity=${BENCH_PARITY-compile+bf16,compile+bf16+fp8}
parity_steps=${BENCH_PARITY_STEPS:-300}
parity_1b_steps=${BENCH_PARITY_1B_STEPS:-600}
parity_seeds=${BENCH_PARITY_SEEDS:-3}
deadline=${BENCH_DEADLINE_S:-}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0

source "$(dirname "${BASH_SOURCE[0]}")/gpu_common.sh"

count() { tr ',' '\n' <<<"$1" | grep -c . || true; }

# health exits 1 on a warning: its measured rates are the ceilings all the same
section "health level 2" 30 "$py" -m trainstack.cli health --level 2 --json --output "$out/health.json"
health=()
[[ -s "$out/health.json" ]] && health=(--health "$out/health.json")
bench() { "$py" -m trainstack.cli bench --steps "$steps" --warmup "$warmup" --timeout 600 --out "$out" "${health[@]}" "$@"; }

for b in $batches_8b; do
  [[ -n "$modes_8b" ]] && section "llama3.1-8b batch $b seq 8192" $((150 * $(count "$modes_8b"))) \
    bench --preset llama3.1-8b --batch "$b" --seq 8192 --ablation --modes "$modes_8b"
done
[[ -n "$modes_1b" ]] && section "1b batch 4 seq 4096" $((50 * $(count "$modes_1b"))) \
  bench --preset 1b --batch 4 --seq 4096 --ablation --modes "$modes_1b"
[[ -n "$modes_3b" ]] && section "3b batch 2 seq 4096" $((60 * $(count "$modes_3b"))) \
  bench --preset 3b --batch 2 --seq 4096 --ablation --modes "$modes_3b"
[[ -n "$parity" ]] && section "parity 125m" 110 \
  "$py" -m trainstack.cli bench --preset 125m --batch 4 --seq 1024 --parity "$parity" --steps "$parity_steps" --warmup 2 --out "$out"
[[ -n "$parity" ]] && section "parity 1b" $((150 * parity_seeds)) \
  "$py" -m trainstack.cli bench --preset 1b --batch 4 --seq 1024 --parity "$parity" --parity-seeds "$parity_seeds" --steps "$parity_1b_steps" --warmup 2 --out "$out"
self="${parity%%,*},${parity%%,*}"
[[ -n "$parity" ]] && section "parity 125m, $self" 90 \
  "$py" -m trainstack.cli bench --preset 125m --batch 4 --seq 1024 --parity "$self" --steps "$parity_steps" --warmup 2 --out "$out/self"
[[ -n "$parity" ]] && section "parity 1b, $self" $((150 * parity_seeds)) \
  "$py" -m trainstack.cli bench --preset 1b --batch 4 --seq 1024 --parity "$self" --parity-seeds "$parity_seeds" --steps "$parity_1b_steps" --warmup 2 --out "$out/self"

"$py" benchmarks/reference_h200.py "$out"

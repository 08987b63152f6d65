#!/usr/bin/env bash
# Llama 3.1 8B at sequence 8192 on one 80 GB GPU, NeMo's 16 sequences per optimizer step: the plan
# memplan chooses (bench's `compile+bf16+planned`: recompute per block, and where the budget needs
# it the master weights and AdamW state in host memory, stepped by the CPU), then DeepSpeed
# ZeRO-Offload on the same model (`zero2+offload`, the anchor a user would pick instead), each in
# a process of its own; one line side by side with the ratio.
#
# Usage: benchmarks/offload_8b.sh [OUTDIR]   (default benchmarks/results/offload_8b)
# Env: OFFLOAD_STEPS (10), OFFLOAD_WARMUP (2), OFFLOAD_CAP_GIB (74: the plan's budget, enforced),
#      OFFLOAD_DEADLINE_S (seconds for the whole script: the anchor gets what the plan left; the
#      plan all of it where DeepSpeed is not installed)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/offload_8b}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH="${PYTHONPATH:-}:$PWD/src"
steps=${OFFLOAD_STEPS:-10}
deadline=${OFFLOAD_DEADLINE_S:-1500}
common=(--preset llama3.1-8b --seq 8192 --batch 1 --accum 16 --steps "$steps" --warmup "${OFFLOAD_WARMUP:-2}")

if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "skip: no GPU (torch.cuda.is_available() is False)"
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
free -g | head -2 | tee -a "$out/device.txt"

run() {  # name seconds bench-arguments...
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$py" -m trainstack.cli bench "${common[@]}" "$@" --out "$out/$name" --json > "$out/$name.json" 2> "$out/$name.err"
  echo "$name: exit $? in $((SECONDS - start)) s"
  tail -n 30 "$out/$name.err" | cut -c1-400
}
share=85
"$py" -c 'import deepspeed' 2>/dev/null || share=100
run planned $((deadline * share / 100)) --modes compile+bf16+planned --memory-cap-gib "${OFFLOAD_CAP_GIB:-74}"
left=$((deadline - SECONDS))
if (( share == 100 )); then
  echo "zero_offload: not run (DeepSpeed is not installed)"
elif (( left > 60 )); then
  run zero_offload "$left" --modes zero2+offload
else
  echo "zero_offload: not run (${left} s left of the deadline)"
fi
dmesg 2>/dev/null | grep -i "killed process" | tail -n 2

"$py" - "$out" <<'PY'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
rows = {}
for name in ("planned", "zero_offload"):
    for path in sorted((out / name).glob("bench-*.jsonl")):
        rows[name] = json.loads(path.read_text().splitlines()[-1])
for name, r in rows.items():
    print(f"{name}: {r['mode']} {r['status']} tok/s {r.get('tokens_per_s_per_gpu') or 0:,.0f} MFU {100 * (r.get('mfu') or 0):.1f}% "
          f"step ms {r.get('step_ms_median') or 0:,.0f} peak alloc GiB {r.get('mem_allocated_gib')} loss {r.get('loss_first')} -> {r.get('loss_final')} "
          f"state {r.get('state_lived')} host {r.get('host_optimizer')} plan {r.get('plan')} error {r.get('error')}")
a, b = rows.get("planned"), rows.get("zero_offload")
if a and b and a.get("tokens_per_s_per_gpu") and b.get("tokens_per_s_per_gpu"):
    print(f"planned / ZeRO-Offload tokens/s: {a['tokens_per_s_per_gpu'] / b['tokens_per_s_per_gpu']:.2f}x")
PY

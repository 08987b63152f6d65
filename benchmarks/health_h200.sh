#!/usr/bin/env bash
# `trainstack health` on one GPU against plain torch loops measured in the same run.
#
# Prints, side by side: the GEMM rate of the level-2 check against a plain
# torch.matmul loop (bf16 8192^3), the device-copy bandwidth of the check against a
# plain copy loop, and the wall time of a whole level-2 run. Exits 1 when a ratio
# leaves 0.95..1.05 or level 2 takes 60 s or more.
#
# Usage: benchmarks/health_h200.sh [OUTDIR]   (default benchmarks/results/health_h200)
# Writes: health_h200_nvml.json (raw NVML answers), health_h200_level{1,2,3}.json,
#         health_h200_summary.txt
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/health_h200}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH="${PYTHONPATH:-}:$PWD/src"

if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "skip: no GPU (torch.cuda.is_available() is False)"
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv || true
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE-<unset>}"

# Raw NVML answers, the fixture the parsing tests replay.
"$py" - "$out/health_h200_nvml.json" <<'PY'
import json, sys
from trainstack.health.nvml import PynvmlSource
src = PynvmlSource()
with open(sys.argv[1], "w") as fh:
    json.dump(src.record(), fh, indent=2)
src.close()
PY

# Plain loops: what torch alone reaches on this card, before and after the checks.
plain() {
  "$py" - <<'PY'
import time, torch
def loop(fn, iters):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
tflops = 2 * n**3 / loop(lambda: torch.matmul(a, b), 50) / 1e12
src = torch.randn(2**28, device="cuda")  # 1 GiB float32
dst = torch.empty_like(src)
gbps = 2 * src.numel() * 4 / loop(lambda: dst.copy_(src), 50) / 1e9
print(f"{tflops:.1f} {gbps:.1f}")
PY
}

# The health verb's own command, started alone so that no other verb's imports weigh on its time.
health() { "$py" -c 'import typer; from trainstack.health.command import command; typer.run(command)' "$@"; }

read -r plain_tflops_1 plain_gbps_1 < <(plain)
health --level 1 --json > "$out/health_h200_level1.json"; echo "level 1 exit $?"
start=$EPOCHREALTIME
health --level 2 --json > "$out/health_h200_level2.json"; code2=$?
end=$EPOCHREALTIME
echo "level 2 exit $code2"
read -r plain_tflops_2 plain_gbps_2 < <(plain)
health --level 3 --duration 20 --json > "$out/health_h200_level3.json"; echo "level 3 exit $?"
health --level 1 || true

# The NCCL path of the all-reduce check, one rank (bus bandwidth is 0 by definition for one rank).
"$py" - <<'PY'
from trainstack.health.allreduce import run_allreduce
r = run_allreduce(1, backend="nccl", nbytes=2**30)
print(f"nccl 1 rank: correct={r.correct} algbw={r.algbw_gbps:.1f} GB/s busbw={r.busbw_gbps:.1f} GB/s")
PY

"$py" - "$out" "$start" "$end" "$plain_tflops_1" "$plain_tflops_2" "$plain_gbps_1" "$plain_gbps_2" <<'PY' | tee "$out/health_h200_summary.txt"
import json, sys
out, level2_s = sys.argv[1], float(sys.argv[3]) - float(sys.argv[2])
del sys.argv[2]
plain_tflops = max(float(sys.argv[3]), float(sys.argv[4]))
plain_gbps = max(float(sys.argv[5]), float(sys.argv[6]))
report = json.load(open(f"{out}/health_h200_level2.json"))
value = {c["name"]: c["value"] for c in report["checks"] if c["gpu"] in (0, None)}
rows = [
    ("bf16 GEMM 8192^3 (TFLOP/s)", value["gemm.bf16"], plain_tflops),
    ("device copy 1 GiB (GB/s)", value["copy.device"], plain_gbps),
]
print(f"{'figure':30} {'health':>10} {'plain loop':>11} {'ratio':>7}")
ok = True
for name, check, plain in rows:
    ratio = check / plain
    ok &= 0.95 <= ratio <= 1.05
    print(f"{name:30} {check:10.1f} {plain:11.1f} {ratio:7.3f}")
print(f"{'pinned h2d / d2h (GB/s)':30} {value['copy.h2d']:10.1f} {value['copy.d2h']:11.1f}")
print(f"{'gemm relative error':30} {value['gemm.correctness']:10.2e}")
print(f"level 2 wall time: {level2_s:.1f} s (limit 60 s); status {report['status']}, checks {report['seconds']:.1f} s")
print(f"plain loops (before, after): {sys.argv[3]}, {sys.argv[4]} TFLOP/s; {sys.argv[5]}, {sys.argv[6]} GB/s")
ok &= level2_s < 60
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY

#!/usr/bin/env bash
# The Slurm prolog and epilog on a real GPU node: the command the rendered wrappers exec
# (render.cluster.node_check), on a healthy node and with faults a node really shows
# (a GPU missing, a driver too old, a GEMM rate under its floor), then the fleet report
# read from the node files they wrote.
#
# Usage: benchmarks/prolog_gpu.sh [OUTDIR]   (default benchmarks/results/prolog_gpu)
# Writes: OUTDIR/summary.txt (case, exit, wall seconds, the one reason line), OUTDIR/nodes/*.json,
#         OUTDIR/fleet.json, OUTDIR/fleet.html. Exits 1 when a case's exit differs from Slurm's
#         convention (0 passes, 1 drains) as expected for it.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/prolog_gpu}
mkdir -p "$out/nodes"
py=${PYTHON:-python3}
export PYTHONPATH="${PYTHONPATH:-}:$PWD/src"

if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "skip: no GPU (torch.cuda.is_available() is False)"
  exit 0
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"

# the wrapper's own command, as render writes it into slurm/prolog.sh and slurm/epilog.sh
mapfile -t prolog < <("$py" -c 'from trainstack.render.cluster import node_check, PROLOG_LEVEL as L; print("\n".join(node_check("'"$py"'", L)))')
mapfile -t epilog < <("$py" -c 'from trainstack.render.cluster import node_check, EPILOG_LEVEL as L; print("\n".join(node_check("'"$py"'", L)))')
printf '%s\n' "prolog: ${prolog[*]}" "epilog (after a failed job): ${epilog[*]}" | tee "$out/commands.txt"

cat > "$out/gemm_floor.toml" <<'TOML'
# a fleet's floor no card reaches: the level-2 GEMM is measured, then judged critical
[default]
gemm_bf16_tflops = { critical_below = 5000 }
TOML

fails=0
: > "$out/summary.txt"
case_() {  # name expected_exit node_file command...
  local name=$1 want=$2 node=$3
  shift 3
  local start=$SECONDS line rc
  if [[ -n "$node" ]]; then
    line=$(SLURMD_NODENAME=$node "$@" --node-out "$out/nodes" 2>"$out/$name.stderr"); rc=$?
  else
    line=$("$@" 2>"$out/$name.stderr"); rc=$?
  fi
  local verdict=as-expected
  [[ $rc == "$want" ]] || { verdict="UNEXPECTED (wanted $want)"; fails=$((fails + 1)); }
  printf '%-22s exit %s  %3d s  %-10s %s\n' "$name" "$rc" $((SECONDS - start)) "$verdict" "$line" | tee -a "$out/summary.txt"
}

case_ prolog-healthy 0 gpu-ok "${prolog[@]}"
case_ epilog-healthy 0 gpu-ok-epilog "${epilog[@]}"
case_ prolog-gpu-missing 1 gpu-missing "${prolog[@]}" --expect-gpus 2
case_ prolog-old-driver 1 gpu-old-driver "${prolog[@]}" --min-driver 999.0
case_ epilog-gemm-floor 1 gpu-slow-gemm "${epilog[@]}" --thresholds "$out/gemm_floor.toml"
# the fleet report over what the nodes wrote: the failing ones named, exit 1 (a node fails)
case_ fleet 1 "" "$py" -m trainstack health --fleet "$out/nodes" --output "$out/fleet.json" --html "$out/fleet.html"
"$py" -m trainstack health --fleet "$out/nodes" > "$out/fleet.txt" 2>&1
cat "$out/fleet.txt"
exit $((fails > 0))

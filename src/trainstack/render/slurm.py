"""Slurm files for a flavour: the prolog and epilog wrappers (Slurm's convention: exit 0 passes,
non-zero drains the node) and sbatch scripts for the fleet's health (each node's own
measurements, then an all-reduce between the nodes) and a multi-node bench (srun starts one
torchrun a node, joined by a c10d rendezvous on the job's first node). Pure: text only."""

from __future__ import annotations

from trainstack.render import quote
from trainstack.render.cluster import EPILOG_LEVEL, FLEET_LEVEL, PROLOG_LEVEL, Placement, allreduce_worker, bench_command, node_check

HEADER = """\
#!/bin/sh
# {what}
# trainstack stack {name} {release}, flavour {slug}; rendered by `trainstack render --cluster slurm`.
"""


def _words(argv: list[str]) -> str:
    return " ".join(quote.shell(a, "cluster command") for a in argv)


def _py(argv: list[str]) -> str:
    """A command whose program is the node's interpreter, $PY."""
    return '"$PY" ' + _words(argv[1:])


def _head(p: Placement, what: str) -> str:
    return HEADER.format(what=what, name=quote.comment(p.stack.stack.name), release=quote.comment(p.stack.stack.release),
                         slug=quote.comment(p.slug))


def prolog(p: Placement, *, drain: bool) -> str:
    how = ("a failing node drains itself with trainstack's reason (scontrol update ... reason=...), as NHC does; "
           "sinfo -R shows it" if drain else
           "no Slurm command is called (Slurm's advice); a failure drains the node with Slurm's fixed reason "
           "'Prolog error', trainstack's reason goes to slurmd's log")
    options = ["--drain"] if drain else []
    return _head(p, "Prolog: the quick readiness check before every job (slurm.conf: Prolog=THIS, PrologFlags=Alloc).") + f"""\
# Exit 0 passes; exit 1 makes slurmd drain the node. Mode: {how}.
# TRAINSTACK_NODE_OUT (in slurmd's environment): a folder for <node>.json, the fleet report's input.
set -u
PY={quote.shell(p.python, "python")}
if [ -n "${{TRAINSTACK_NODE_OUT:-}}" ]; then set -- --node-out "$TRAINSTACK_NODE_OUT"; else set --; fi
exec {_py(node_check("PY", PROLOG_LEVEL, *options))} "$@"
"""


def epilog(p: Placement, *, drain: bool) -> str:
    options = ["--drain"] if drain else []
    return _head(p, "Epilog: after a failed job the deeper check (GEMM, copies); after a good one the quick one.") + f"""\
# slurm.conf: Epilog=THIS. The job script's exit status (SLURM_JOB_EXIT_CODE) or its steps' highest exit
# code (SLURM_JOB_DERIVED_EC), both set for an Epilog, pick the level. Exit 1 drains the node.
set -u
PY={quote.shell(p.python, "python")}
level={PROLOG_LEVEL}
case "${{SLURM_JOB_EXIT_CODE:-0}}:${{SLURM_JOB_DERIVED_EC:-0}}" in 0:0) ;; *) level={EPILOG_LEVEL} ;; esac
if [ -n "${{TRAINSTACK_NODE_OUT:-}}" ]; then set -- --node-out "$TRAINSTACK_NODE_OUT"; else set --; fi
exec "$PY" -m trainstack health --prolog --level "$level" {_words(options)} "$@"
"""


def _sbatch_head(p: Placement, what: str, name: str) -> str:
    c = p.stack.cluster
    lines = [
        "#!/bin/bash",
        f"# {what}",
        f"# trainstack stack {quote.comment(p.stack.stack.name)} {quote.comment(p.stack.stack.release)}, "
        f"flavour {quote.comment(p.slug)}; rendered by `trainstack render --cluster slurm`.",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={c.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --output={name}-%j.out",
    ]
    if p.gpus:
        lines.append(f"#SBATCH --gpus-per-node={p.gpus}")
    if c.partition:
        lines.append(f"#SBATCH --partition={c.partition}")
    lines += ["set -euo pipefail", f"PY={quote.shell(p.python, 'python')}"]
    lines += [f"export {k}={quote.shell(v, k)}" for k, v in p.network_env().items()]
    lines += [
        "export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    ]
    return "\n".join(lines) + "\n"


def _torchrun(p: Placement) -> str:
    return (f'srun --ntasks-per-node=1 "$PY" -m torch.distributed.run --nnodes="$SLURM_NNODES" '
            f'--nproc-per-node={p.ranks_per_node} --rdzv-backend=c10d --rdzv-endpoint="$head:{p.stack.cluster.port}" '
            '--rdzv-id="$SLURM_JOB_ID"')


def health_sbatch(p: Placement) -> str:
    worker = _words(allreduce_worker(p)) + ' --out="$OUT/allreduce.json"'
    return _sbatch_head(p, "The fleet's health: every node's own measurements, an all-reduce between the nodes, one report.",
                        "trainstack-health") + f"""\
# usage: sbatch THIS [DIR]   DIR (default trainstack-fleet-JOBID) must be on a filesystem every node shares
OUT=${{1:-trainstack-fleet-$SLURM_JOB_ID}}
mkdir -p "$OUT"
# 1. every node checks and measures itself (GEMM, HBM, H2D; the host's own rates on a node without GPU)
srun --ntasks-per-node=1 {_py(node_check("PY", FLEET_LEVEL))} --node-out "$OUT" || true
# 2. the all-reduce between the nodes, per message size (algbw, busbw = algbw * 2(n-1)/n)
{_torchrun(p)} {worker}
# 3. one report: the table, fleet.json and fleet.html. Its findings (failing nodes, outliers) are data,
# not a failure of this job: a failed job would send every node through the epilog's deeper check.
"$PY" -m trainstack health --fleet "$OUT" --output "$OUT/fleet.json" --html "$OUT/fleet.html" || status=$?
if [ "${{status:-0}}" = 1 ]; then echo "trainstack: findings in $OUT/fleet.json"; exit 0; fi
exit "${{status:-0}}"
"""


def bench_sbatch(p: Placement) -> str:
    command = _words(bench_command(p)) + ' --out "$OUT"'
    return _sbatch_head(p, "The stack's bench across nodes under FSDP2: srun starts one torchrun a node.",
                        "trainstack-bench") + f"""\
# usage: sbatch THIS [DIR]   DIR (default trainstack-bench-JOBID) on a shared filesystem; rows name the nodes
OUT=${{1:-trainstack-bench-$SLURM_JOB_ID}}
mkdir -p "$OUT"
{_torchrun(p)} {command}
"""


def slurm_files(p: Placement) -> dict[str, str]:
    return {
        "slurm/prolog.sh": prolog(p, drain=False),
        "slurm/prolog-drain.sh": prolog(p, drain=True),
        "slurm/epilog.sh": epilog(p, drain=False),
        "slurm/epilog-drain.sh": epilog(p, drain=True),
        "slurm/health.sbatch": health_sbatch(p),
        "slurm/bench.sbatch": bench_sbatch(p),
    }

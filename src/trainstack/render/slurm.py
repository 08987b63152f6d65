"""Slurm files for a flavour: the prolog and epilog wrappers (Slurm's convention: exit 0 passes,
non-zero drains the node) and sbatch scripts for the fleet's health (each node's own
measurements, then an all-reduce between the nodes) and a multi-node bench (srun starts one
torchrun a node, joined by a c10d rendezvous on the job's first node); with pyxis, every sbatch
step runs in the stack's image (srun --container-image, pinned by digest). Pure: text only."""

from __future__ import annotations

from collections.abc import Sequence

from trainstack.render import quote
from trainstack.render.cluster import (
    EPILOG_LEVEL,
    FLEET_LEVEL,
    NODE_CHECK,
    PROLOG_LEVEL,
    Placement,
    allreduce_worker,
    bench_command,
    node_check,
)

HEADER = """\
#!/bin/sh
# {what}
# trainstack stack {name} {release}, flavour {slug}; rendered by `trainstack render --cluster slurm`.
"""


def _words(argv: Sequence[str]) -> str:
    return " ".join(quote.shell(a, "cluster command") for a in argv)


def _py(argv: list[str]) -> str:
    """A command whose program is the node's interpreter, $PY."""
    return '"$PY" ' + _words(argv[1:])


def _head(p: Placement, what: str) -> str:
    return HEADER.format(
        what=what, name=quote.comment(p.stack.stack.name), release=quote.comment(p.stack.stack.release), slug=quote.comment(p.slug)
    )


# event: (what the script is, the lines that pick the level, the --level word)
HOOKS = {
    "prolog": ("Prolog: the quick readiness check before every job (slurm.conf: Prolog=THIS, PrologFlags=Alloc).", "", str(PROLOG_LEVEL)),
    "epilog": (
        "Epilog: after a failed job the deeper check (GEMM, copies); after a good one the quick one.",
        "# slurm.conf: Epilog=THIS. The job script's exit status (SLURM_JOB_EXIT_CODE) or its steps' highest exit\n"
        "# code (SLURM_JOB_DERIVED_EC), both set for an Epilog, pick the level.\n"
        f"level={PROLOG_LEVEL}\n"
        f'case "${{SLURM_JOB_EXIT_CODE:-0}}:${{SLURM_JOB_DERIVED_EC:-0}}" in 0:0) ;; *) level={EPILOG_LEVEL} ;; esac\n',
        '"$level"',
    ),
}


def hook(p: Placement, event: str, *, drain: bool) -> str:
    """The prolog or the epilog (``event``): the node check, exit 0 passes, exit 1 drains the node."""
    what, pick_level, level = HOOKS[event]
    how = (
        "a failing node drains itself with trainstack's reason (scontrol update ... reason=...), as NHC does; sinfo -R shows it"
        if drain
        else "no Slurm command is called (Slurm's advice); a failure drains the node with Slurm's fixed reason "
        f"'{event.capitalize()} error', trainstack's reason goes to slurmd's log"
    )
    drain_option = " --drain" if drain else ""
    return (
        _head(p, what)
        + f"""\
# Exit 0 passes; exit 1 makes slurmd drain the node. Mode: {how}.
# TRAINSTACK_NODE_OUT (in slurmd's environment): a folder for <node>.json, the fleet report's input.
set -u
PY={quote.shell(p.python, "python")}
{pick_level}if [ -n "${{TRAINSTACK_NODE_OUT:-}}" ]; then set -- --node-out "$TRAINSTACK_NODE_OUT"; else set --; fi
exec "$PY" {_words(NODE_CHECK)} --level {level}{drain_option} "$@"
"""
    )


IMAGE_PYTHON = "python"  # the interpreter on the PATH of the stack's image


def enroot_uri(image: str) -> str:
    """The image as pyxis and enroot name it: ``REGISTRY#REPOSITORY:TAG@DIGEST`` where the first
    component is a registry (it holds a dot or a port, or is localhost), else Docker Hub's
    ``NAMESPACE/REPOSITORY:TAG@DIGEST``. enroot reads a digest from release 4.0 on."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


def _container_image(p: Placement) -> str:
    return p.squashfs or enroot_uri(p.image)


def _image_lines(p: Placement) -> list[str]:
    if not p.pyxis:
        return []
    if p.squashfs:
        return [
            f"# Every step runs in the stack's image through pyxis, from the squashfs file "
            f"{quote.comment(p.squashfs)} on the nodes (enroot import of {quote.comment(p.image)})."
        ]
    lines = [f"# Every step runs in the stack's image through pyxis: {quote.comment(p.image)}"]
    if p.pinned:
        lines.append("# (pinned by digest: enroot 4.0 or later; with an older enroot, render with --squashfs)")
    else:
        lines.append(f"# image NOT pinned by digest: {quote.comment(p.unpinned_why)}")
    return lines


def _sbatch_head(p: Placement, what: str, name: str) -> str:
    c = p.stack.cluster
    lines = [
        "#!/bin/bash",
        f"# {what}",
        f"# trainstack stack {quote.comment(p.stack.stack.name)} {quote.comment(p.stack.stack.release)}, "
        f"flavour {quote.comment(p.slug)}; rendered by `trainstack render --cluster slurm`.",
        *_image_lines(p),
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={c.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --output={name}-%j.out",
    ]
    if p.gpus:
        lines.append(f"#SBATCH --gpus-per-node={p.gpus}")
    if c.partition:
        lines.append(f"#SBATCH --partition={c.partition}")
    python = IMAGE_PYTHON if p.pyxis else p.python
    lines += ["set -euo pipefail", f"PY={quote.shell(python, 'python')}"]
    lines += [f"export {k}={quote.shell(v, k)}" for k, v in p.network_env().items()]
    lines += [
        "export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    ]
    return "\n".join(lines) + "\n"


def _out(p: Placement, default: str) -> str:
    """OUT, the shared folder (the script's first argument); with pyxis, the image's steps mount it."""
    text = f'OUT=${{1:-{default}-$SLURM_JOB_ID}}\nmkdir -p "$OUT"\n'
    if p.pyxis:
        text += (
            'OUT=$(cd "$OUT" && pwd)  # pyxis mounts absolute paths\n'
            'case "$OUT" in *[,:]*) echo "error: $OUT: pyxis cannot mount a path holding a comma or a colon '
            '(give another DIR)" >&2; exit 64 ;; esac\n'
            f"IMAGE=(--container-image={quote.shell(_container_image(p), 'image')} "
            '--container-mounts="$OUT:$OUT" --container-workdir="$OUT")\n'
        )
    return text


def _srun(p: Placement, options: str = "--ntasks-per-node=1") -> str:
    return f'srun {options} "${{IMAGE[@]}}"' if p.pyxis else f"srun {options}"


def _torchrun(p: Placement) -> str:
    return (
        f'{_srun(p)} "$PY" -m torch.distributed.run --nnodes="$SLURM_NNODES" '
        f'--nproc-per-node={p.ranks_per_node} --rdzv-backend=c10d --rdzv-endpoint="$head:{p.stack.cluster.port}" '
        '--rdzv-id="$SLURM_JOB_ID"'
    )


def health_sbatch(p: Placement) -> str:
    worker = _words(allreduce_worker(p)) + ' --out="$OUT/allreduce.json"'
    report = _srun(p, "--nodes=1 --ntasks=1") + " " if p.pyxis else ""
    return (
        _sbatch_head(
            p, "The fleet's health: every node's own measurements, an all-reduce between the nodes, one report.", "trainstack-health"
        )
        + f"""\
# usage: sbatch THIS [DIR]   DIR (default trainstack-fleet-JOBID) must be on a filesystem every node shares
{_out(p, "trainstack-fleet")}\
# 1. every node checks and measures itself (GEMM, HBM, H2D; the host's own rates on a node without GPU)
{_srun(p)} {_py(node_check("PY", FLEET_LEVEL))} --node-out "$OUT" || true
# 2. the all-reduce between the nodes, per message size (algbw, busbw = algbw * 2(n-1)/n)
{_torchrun(p)} {worker}
# 3. one report: the table, fleet.json and fleet.html. Its findings (failing nodes, outliers) are data,
# not a failure of this job: a failed job would send every node through the epilog's deeper check.
{report}"$PY" -m trainstack health --fleet "$OUT" --output "$OUT/fleet.json" --html "$OUT/fleet.html" || status=$?
if [ "${{status:-0}}" = 1 ]; then echo "trainstack: findings in $OUT/fleet.json"; exit 0; fi
exit "${{status:-0}}"
"""
    )


def bench_sbatch(p: Placement) -> str:
    command = _words(bench_command(p)) + ' --out "$OUT"'
    return (
        _sbatch_head(p, "The stack's bench across nodes under FSDP2: srun starts one torchrun a node.", "trainstack-bench")
        + f"""\
# usage: sbatch THIS [DIR]   DIR (default trainstack-bench-JOBID) on a shared filesystem; rows name the nodes
{_out(p, "trainstack-bench")}\
{_torchrun(p)} {command}
"""
    )


def slurm_files(p: Placement) -> dict[str, str]:
    return {
        **{f"slurm/{event}{'-drain' if drain else ''}.sh": hook(p, event, drain=drain) for event in HOOKS for drain in (False, True)},
        "slurm/health.sbatch": health_sbatch(p),
        "slurm/bench.sbatch": bench_sbatch(p),
    }

"""`trainstack render`: Dockerfiles, docker-bake.hcl, a CI workflow and environment.yml from a locked stack."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., help="The stack file (its lock must be current)."),
    out: Path = typer.Option(Path("build/render"), "--out", metavar="DIR", help="Directory for the rendered files."),
    flavour: str | None = typer.Option(None, "--flavour", "--flavor", help="Render one flavour (its slug); default: all."),
    json_out: bool = typer.Option(False, "--json", help="Print the files changed as JSON on stdout."),
    cluster: str | None = typer.Option(
        None,
        "--cluster",
        help="Also the files a cluster runs, per flavour: slurm "
        "(prolog, epilog, sbatch for fleet health and bench) or kubernetes (DaemonSet, "
        "indexed Jobs); see docs/cluster.md.",
    ),
    build_dir: Path = typer.Option(
        Path("build"),
        "--build-dir",
        help="With --cluster: where the flavours were built (their build.json gives the image digest, their venv the interpreter).",
    ),
    python: str | None = typer.Option(
        None,
        "--python",
        help="With --cluster slurm: the interpreter on the nodes (holding trainstack and torch) [default: the built venv's].",
    ),
    image: bool = typer.Option(
        False,
        "--image",
        help="With --cluster slurm: the sbatch scripts run the stack's image "
        "through pyxis (srun --container-image), pinned by the digest build.json records.",
    ),
    squashfs: str | None = typer.Option(
        None,
        "--squashfs",
        metavar="PATH",
        help="With --image: the image as a squashfs file on the nodes (enroot import), an absolute path.",
    ),
) -> None:
    """Render a Dockerfile per flavour plus docker-bake.hcl, a CI workflow and environment.yml.

    Example: trainstack render examples/stacks/torch-cuda.toml --out build/render
    """
    from trainstack.console import out as console
    from trainstack.errors import UsageError
    from trainstack.fsutil import check_output
    from trainstack.render import render_stack
    from trainstack.render.placement import ENGINES, ClusterOptions, squashfs_path

    check_output(out, "--out", folder=True)
    if cluster is not None and cluster not in ENGINES:
        raise UsageError(f"--cluster {cluster}: accepted values are {', '.join(ENGINES)}")
    if cluster is None and python is not None:
        raise UsageError("--python: accepted only with --cluster slurm")
    if image and cluster != "slurm":
        raise UsageError("--image: accepted only with --cluster slurm (Kubernetes runs the image already)")
    if squashfs is not None and not image:
        raise UsageError("--squashfs: accepted only with --image")
    if squashfs is not None:
        squashfs_path(squashfs)
    options = ClusterOptions(cluster, build_dir, python, image, squashfs) if cluster else None
    changed = render_stack(stack, out, flavour, cluster=options)
    if json_out:
        import json

        from trainstack.console import emit_json

        emit_json(json.dumps({"out": str(out), "changed": [str(p) for p in changed]}, indent=2), to_stdout=True, output=None)
        return
    for path in changed:
        console.print(f"wrote {path}", highlight=False)
    console.print(f"{len(changed)} file(s) changed under {out}", highlight=False)

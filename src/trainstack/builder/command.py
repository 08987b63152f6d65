"""`trainstack build`: a venv or an OCI image per flavour, from the stack's current lock."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., help="The stack file (its lock must be current)."),
    flavour: str | None = typer.Option(None, "--flavour", "--flavor", help="Build one flavour (its slug); default: all."),
    backend: str | None = typer.Option(
        None,
        "--backend",
        show_default=False,
        help="venv (uv, needs only Python) or oci (buildah or docker buildx); default: the stack's [build] backend, venv unless it says.",
    ),
    build_dir: Path = typer.Option(Path("build"), "--build-dir", help="Outputs go to BUILD_DIR/<flavour>/."),
    skip_sources: bool = typer.Option(False, "--skip-sources", help="Leave out components built from source (recorded in build.json)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when build.json matches the lock."),
    signing_key: Path | None = typer.Option(
        None,
        "--signing-key",
        metavar="KEY",
        help="An ed25519 private key (PEM, mode 600): sign each build's provenance (BUILD_DIR/<flavour>/provenance.intoto.json).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Check the lock, the backend and its tools, and say what would be built; download and write nothing."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the build records (build.json of each flavour) as a JSON list on stdout."),
    offline: bool = typer.Option(
        False,
        "--offline",
        help="Install from uv's cache and the installed Pythons only, never the network (as UV_OFFLINE=1 does).",
    ),
) -> None:
    """Build each flavour: BUILD_DIR/<flavour>/ gets venv/ (or an image), build.json and logs/.
    A failed step's log is kept under BUILD_DIR/<flavour>/logs/.

    Example: trainstack build examples/stacks/cpu-minimal.toml --backend venv
    """
    from trainstack.builder import build_stack
    from trainstack.console import out
    from trainstack.fsutil import check_output
    from trainstack.offline import go_offline

    if offline:
        go_offline()

    check_output(build_dir, "--build-dir", folder=True)
    records = build_stack(
        stack,
        flavour=flavour,
        backend=backend,
        build_dir=build_dir,
        skip_sources=skip_sources,
        force=force,
        signing_key=signing_key,
        dry_run=dry_run,
    )
    if dry_run:
        out.print("dry run: nothing built, nothing written", highlight=False)
        return
    if json_out:
        from trainstack.console import emit_json

        emit_json("[" + ",\n".join(r.model_dump_json(indent=2) for r in records) + "]", to_stdout=True, output=None)
        return
    for record in records:
        made = record.image or str(build_dir / record.flavour / "venv")
        size = sum(record.sizes.values()) / 1024**2
        out.print(f"{record.flavour}: {made} ({size:.0f} MiB, {record.seconds:.1f}s)", highlight=False)

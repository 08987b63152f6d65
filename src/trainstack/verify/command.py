"""`trainstack verify`: prove a built environment works, with one verdict and verify.json."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path | None = typer.Argument(None, help="The stack file; its flavour's venv under BUILD_DIR is verified."),
    flavour: str | None = typer.Option(None, "--flavour", "--flavor", help="Flavour slug (needed when the stack has several)."),
    python: Path | None = typer.Option(None, "--python", help="Verify this interpreter's environment instead of a built venv."),
    build_dir: Path = typer.Option(Path("build"), "--build-dir", help="Where 'trainstack build' put the flavours."),
    skip: list[str] = typer.Option(
        [], "--skip", help="Leave out a part: report, files, advisories, ops, linkcheck, smoke, suites (the result is then a partial one)."
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Write the result here (default with a stack: BUILD_DIR/<flavour>/verify.json, or verify.partial.json "
        "beside it when a part is skipped).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON instead of the summary."),
    provenance: Path | None = typer.Option(
        None,
        "--provenance",
        metavar="FILE",
        help="Check this signed provenance (build --signing-key) first: its signature, the environment, SBOM, stack and lock it names.",
    ),
    public_key: Path | None = typer.Option(
        None, "--public-key", metavar="KEY", help="The ed25519 public key (PEM) --provenance is checked with."
    ),
    trust: bool = typer.Option(
        False, "--trust", help="Run suite commands that are not pytest (they run whatever the stack names; 'trainstack check' shows them)."
    ),
) -> None:
    """Report, installed files, advisories, op table, link check, smoke checks and test suites, inside the environment.

    Example: trainstack verify examples/stacks/cpu-minimal.toml --flavour cpu-debian12-py311-release
    """
    from trainstack.console import emit_json, err, out, verbosity
    from trainstack.fsutil import check_output
    from trainstack.verify.render import render_verify, render_verify_quiet
    from trainstack.verify.run import run_verify
    from trainstack.verify.scope import make_scope

    if output is not None:
        check_output(output, "--output")
    if (provenance is None) != (public_key is None):
        from trainstack.errors import UsageError

        raise UsageError("--provenance and --public-key go together", hint="give both: --provenance FILE --public-key KEY")
    found = None
    if provenance is not None and public_key is not None:
        from trainstack.verify.provenance import check_image_provenance, names_image, open_signed

        found = open_signed(provenance, public_key)
        if names_image(found):  # an image: its provenance alone; its environment is verified inside it
            from trainstack.verify.scope import flavour_slug

            image_signed = check_image_provenance(found, provenance, public_key, stack, flavour_slug(stack, flavour))
            if json_out:
                print(image_signed.model_dump_json(indent=2))
            else:
                out.print(f"provenance: {', '.join(image_signed.checked)} as signed", highlight=False)
                out.print(
                    "verify: the image's provenance alone; its environment is verified in a container of the "
                    "image (trainstack verify --python /opt/venv/bin/python run there)",
                    highlight=False,
                )
            return
    target, scope, default_output = make_scope(stack, flavour, python, build_dir, skip)
    signed = None
    if provenance is not None and public_key is not None:
        from trainstack.verify.provenance import check_provenance

        signed = check_provenance(provenance, public_key, target, scope.stack_path, scope.flavour, found)
        (err if json_out else out).print(f"provenance: {', '.join(signed.checked)} as signed", highlight=False)
    destination = output or default_output
    if destination is not None and output is None:
        check_output(destination, "verify.json (BUILD_DIR/<flavour>/verify.json)")
    result = run_verify(target, scope, trust=trust)
    result.provenance = signed
    if destination is not None:
        emit_json(result.model_dump_json(indent=2), to_stdout=False, output=destination)
    if json_out:
        print(result.model_dump_json(indent=2))
    elif verbosity() < 0:  # -q: the failures and the verdict
        render_verify_quiet(result, out)
    else:
        render_verify(result, out)
        if destination is not None:
            out.print(f"wrote {destination}", highlight=False)
    if result.verdict != "pass":
        raise typer.Exit(1)

"""`trainstack release`: release notes (RELEASE.md, release.json, release.html) from two lock manifests,
or from one for a stack's first release."""

from __future__ import annotations

from pathlib import Path

import typer


def command(
    stack: Path = typer.Argument(..., help="The stack file; its lock manifest is the release being described."),
    previous: Path | None = typer.Option(
        None, "--previous", help="stack.lock.json of the previous release of this stack; leave out for its first release."
    ),
    results: Path | None = typer.Option(
        None, "--results", help="Verify and bench results: <flavour>/verify.json and *.jsonl. Default: build/ if present."
    ),
    previous_results: Path | None = typer.Option(
        None, "--previous-results", help="The previous release's results directory or its release.json, for the deltas."
    ),
    changes: Path | None = typer.Option(
        None, "--changes", help="Changelog fragments <id>.<type>.md. Default: changes/ beside the stack file."
    ),
    out: Path | None = typer.Option(
        None, "--out", metavar="DIR", help="Output directory. Default: <stack>.release/<release>/ beside the stack file."
    ),
    advisories: Path | None = typer.Option(
        None,
        "--advisories",
        metavar="DIR",
        help="A folder of OSV advisories (osv.dev's PyPI export): list those fixed and added per flavour. Default: the stack's [verify] advisories.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print release.json on stdout instead of the files written."),
) -> None:
    """Write release notes: version updates, images, driver requirements, verification, performance and prose.

    Example: trainstack release examples/stacks/cpu-minimal.toml --previous old/stack.lock.json --results build
    """
    from trainstack.console import out as console
    from trainstack.release.publish import make_release

    if out is not None:
        from trainstack.fsutil import check_output

        check_output(out, "--out", folder=True)
    outcome = make_release(
        stack,
        previous,
        results=results,
        previous_results=previous_results,
        out=out,
        changes=changes,
        advisories=advisories,
    )
    if json_out:
        from trainstack.console import emit_json
        from trainstack.fsutil import dump_json

        emit_json(dump_json(outcome.notes.model_dump(mode="json")), to_stdout=True, output=None)
        return
    for path in outcome.written:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    if outcome.consumed_to is not None:
        count = len(outcome.notes.fragments)
        console.print(f"consumed {count} fragment(s) into {outcome.consumed_to}", highlight=False)

"""The release verb's work: read the inputs, render every output in memory, write, consume fragments.

Nothing is written unless all three outputs rendered; the three replace the previous three as
one unit, and fragments are consumed only after that.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from packaging.version import InvalidVersion, Version

from trainstack.attest.advisories import Advisory as OsvAdvisory
from trainstack.attest.advisories import load_advisories
from trainstack.errors import SpecError, UsageError
from trainstack.fsutil import dump_json, read_text, replace_tree
from trainstack.lock import check_lock_current
from trainstack.lock.manifest import Manifest, load_manifest, manifest_path
from trainstack.lock.tags import stack_image_refs
from trainstack.redact import redact
from trainstack.release.drivers import rules_lookup
from trainstack.release.fragments import consume_fragments, release_fragments
from trainstack.release.html import render_html
from trainstack.release.markdown import render_markdown
from trainstack.release.notes import Built, DriverLookup, Inputs, check_same_stack, make_notes
from trainstack.release.plots import charts
from trainstack.release.results import BenchKey, BenchResult, Verified, bench_of_release, read_attributions, read_bench, read_verification
from trainstack.release.schema import ReleaseNotes
from trainstack.stackfile import Stack, load_stack
from trainstack.stackfile.paths import stack_path as confined_path

OUTPUTS = ("RELEASE.md", "release.json", "release.html")
MANIFEST_COPY = "stack.lock.json"  # the release's lock manifest, kept: the next release's --previous


@dataclass(frozen=True)
class Outcome:
    notes: ReleaseNotes
    written: list[Path]
    consumed_to: Path | None  # where the fragments went, None when there were none


def default_out(stack_path: Path, release: str) -> Path:
    """examples/stacks/cpu-minimal.toml, release 2026.12.0 -> examples/stacks/cpu-minimal.release/2026.12.0/."""
    return stack_path.parent / f"{stack_path.stem}.release" / release


def _results_dir(path: Path | None, option: str, default: Path | None = None) -> Path | None:
    if path is None:
        return default if default is not None and default.is_dir() else None
    if not path.is_dir():
        raise UsageError(f"{option} {path}: no such directory", hint="give the directory that holds <flavour>/verify.json")
    return path


def _previous_results(path: Path | None) -> Path | None:
    """A results directory, or the previous release's release.json (it keeps its bench figures)."""
    if path is not None and path.is_file():
        return path
    return _results_dir(path, "--previous-results")


def _previous_bench(path: Path | None) -> dict[BenchKey, BenchResult]:
    if path is not None and path.is_file():
        return bench_of_release(path)
    return read_bench(path)


def _of_flavours(bench: dict[BenchKey, BenchResult], manifest: Manifest) -> dict[BenchKey, BenchResult]:
    """Results of this stack's flavours, and those that name no flavour."""
    return {key: row for key, row in bench.items() if key[0] in manifest.flavours or not key[0]}


def render_all(notes: ReleaseNotes) -> dict[str, str]:
    """File name -> its text, for every output; raises before anything is written."""
    return {
        "RELEASE.md": render_markdown(notes),
        "release.json": dump_json(notes.model_dump(mode="json")),
        "release.html": render_html(notes, charts(notes.performance, notes.release, notes.previous_release or "previous results")),
    }


def make_release(
    stack_path: Path,
    previous_path: Path | None,
    *,
    results: Path | None = None,
    previous_results: Path | None = None,
    out: Path | None = None,
    changes: Path | None = None,
    drivers: DriverLookup | None = None,
    advisories: Path | None = None,
) -> Outcome:
    """Write RELEASE.md, release.json and release.html for the stack's current lock, then
    consume the changelog fragments they include."""
    results_dir = _results_dir(results, "--results", default=Path("build"))
    previous_results_dir = _previous_results(previous_results)
    changes_dir = changes if changes is not None else stack_path.parent / "changes"
    if changes is None and changes_dir.is_symlink():
        raise SpecError(
            f"{changes_dir}: is a symbolic link; the changes folder beside the stack is a folder of "
            "its own (its fragments are read and moved there), or give one with --changes DIR"
        )
    inputs = gather(stack_path, previous_path, results_dir, previous_results_dir, changes_dir, advisories)
    notes = make_notes(inputs, drivers if drivers is not None else partial(rules_lookup, inputs.rules))
    texts = {**render_all(notes), MANIFEST_COPY: read_text(manifest_path(stack_path), "lock manifest")}
    written = write_outputs(out if out is not None else default_out(stack_path, notes.release), texts)
    return Outcome(notes=notes, written=written, consumed_to=consume_fragments(changes_dir, notes.fragments, notes.release))


def gather(
    stack_path: Path,
    previous_path: Path | None,
    results: Path | None,
    previous_results: Path | None,
    changes: Path,
    advisories: Path | None = None,
) -> Inputs:
    """Read and check every input; raises before anything is rendered or written."""
    stack = load_stack(stack_path)
    current = check_lock_current(stack_path)  # a release describes what the stack file locks to now
    previous = None if previous_path is None else load_previous(previous_path)
    if previous is not None and previous_path is not None:
        check_same_stack(previous, current, str(previous_path))
        check_previous_is_older(previous, current, previous_path)
    fragments = release_fragments(changes, current.release)
    return Inputs(
        current=current,
        previous=previous,
        components=[c.key for c in stack.components.values()],
        description=stack.stack.description,
        verification=read_verification(results, current.flavours, Verified(current.stack, current.inputs_hash)),
        bench=_of_flavours(read_bench(results), current),
        attribution=read_attributions(results, current.release),
        previous_bench=_previous_bench(previous_results),
        fragments=fragments,
        rules=stack.rules_in_effect,
        images=stack_image_refs(stack, current.flavours, stack_path),
        advisories=_advisories(stack, stack_path, advisories),
        built=read_built(results, current.flavours, stack.build.backend),
    )


def _advisories(stack: Stack, stack_file: Path, given: Path | None) -> list[OsvAdvisory] | None:
    """--advisories DIR, else the stack's [verify] advisories folder, read; None when neither is given."""
    if given is not None:
        return load_advisories(given)
    if stack.verify.advisories is None:
        return None
    try:
        folder = confined_path(stack.verify.advisories, stack_file.parent, "verify.advisories")
    except ValueError as exc:
        raise SpecError(f"{stack_file}: verify.advisories: {exc}") from None
    return load_advisories(folder)


def read_built(results: Path | None, slugs: Collection[str], backend: str) -> Built | None:
    """The build records beside the results (build writes <slug>/build.json for a venv and
    <slug>.oci/build.json for an image); None without a results folder."""
    if results is None:
        return None
    records = {}
    for slug in slugs:
        kinds = frozenset(
            kind for kind, folder in (("venv", slug), ("oci", f"{slug}.oci")) if _regular_file(results / folder / "build.json")
        )
        if kinds:
            records[slug] = kinds
    return Built(records, backend, str(results))


def _regular_file(path: Path) -> bool:
    return not path.is_symlink() and not path.parent.is_symlink() and path.is_file()


def load_previous(path: Path) -> Manifest:
    """The previous release's manifest; a path that is not there says so, and that a first
    release needs none (not: lock this stack, which would not help)."""
    if not path.exists() and not path.is_symlink():
        raise UsageError(
            f"--previous {path}: no such file",
            hint="give the stack.lock.json of this stack's previous release, or leave --previous out for its first release",
        )
    return load_manifest(path)


def check_previous_is_older(previous: Manifest, current: Manifest, previous_path: Path) -> None:
    """Refuse notes against a later release (the diff would run backwards). Releases are
    ordered as versions (2026.12.0 < 2027.1.0); names that are not versions are not ordered."""
    try:
        newer = Version(previous.release) > Version(current.release)
    except InvalidVersion:
        return
    if newer:
        raise UsageError(
            f"{previous_path}: the previous manifest is of release {previous.release}, "
            f"newer than {current.release}, the release being described",
            hint=f"pass the stack.lock.json of a '{current.stack}' release before {current.release}",
        )


def write_outputs(target: Path, texts: dict[str, str]) -> list[Path]:
    """Replace ``target`` with the three outputs as one unit: a reader (or a kill at any point)
    finds the previous three files or the new three, never a mix."""
    _check_own_directory(target)
    # pages to publish: readable by a web server, not private temp files
    names = [*OUTPUTS, *([MANIFEST_COPY] if MANIFEST_COPY in texts else [])]
    replace_tree(target, {name: redact(texts[name]).encode("utf-8") for name in names}, mode=0o644)
    return [target / name for name in names]


def _check_own_directory(target: Path) -> None:
    if not target.exists() and not target.is_symlink():
        return
    if target.is_symlink() or not target.is_dir():
        raise UsageError(f"--out {target}: is not a directory", hint="give a directory for the release notes alone")
    for entry in sorted(target.iterdir()):
        if entry.name not in (*OUTPUTS, MANIFEST_COPY) or entry.is_symlink() or not entry.is_file():
            raise UsageError(
                f"--out {target}: {entry} is not a release output",
                hint="give a directory for the release notes alone: it is replaced as a whole",
            )

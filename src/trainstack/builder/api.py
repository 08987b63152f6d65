"""build_stack: per flavour, build in a staging directory, record build.json, swap into place."""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
import platform
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.text import Text

from trainstack.attest.provenance import load_signer
from trainstack.buildenv import budget_for, max_jobs
from trainstack.builder.backend import Backend, BuildJob
from trainstack.builder.cpu import effective_cpus
from trainstack.builder.evidence import FILES_RECORD, write_provenance
from trainstack.builder.extensions import require_venv_nvcc
from trainstack.builder.oci import select_oci
from trainstack.builder.record import BuildRecord
from trainstack.builder.steps import Steps
from trainstack.builder.swap import swap_into_place
from trainstack.builder.venv import VenvBackend, python_installed
from trainstack.console import err
from trainstack.errors import BuildError, BusyError, DiskSpaceError, OutputError, SpecError, ToolMissingError, TrainstackError, UsageError
from trainstack.fsutil import atomic_write_json, describe_os_error
from trainstack.lock.inputs import Inputs, load_inputs
from trainstack.lock.layers import FlavourLayers
from trainstack.proc import no_interrupt
from trainstack.stackfile.matrix import Flavour
from trainstack.stackfile.paths import stack_path

BACKENDS = ("venv", "oci")


def make_backend(name: str) -> Backend:
    """The backend called ``name``; UsageError for an unknown one, ToolMissingError when its tools are absent."""
    if name == "venv":
        return VenvBackend()
    if name == "oci":
        return select_oci()
    raise UsageError(f"--backend: unknown backend '{name}'", hint=f"one of: {', '.join(BACKENDS)}")


def build_stack(
    stack_path: Path,
    *,
    flavour: str | None = None,
    backend: str | None = None,
    build_dir: Path = Path("build"),
    skip_sources: bool = False,
    force: bool = False,
    signing_key: Path | None = None,
    dry_run: bool = False,
) -> list[BuildRecord]:
    """Build the selected flavours; a failure leaves each flavour's previous good build in place.
    ``signing_key``: an ed25519 private key; each build's provenance is signed with it. ``backend``:
    None takes the stack's [build] backend."""
    signer = load_signer(signing_key) if signing_key is not None else None  # a bad key is refused before any work
    if backend is not None and backend not in BACKENDS:
        make_backend(backend)  # refused, naming the backends, before anything is read
    inputs = load_inputs(stack_path, flavour)
    chosen = make_backend(backend or inputs.stack.build.backend)
    if chosen.name == "venv" and flavour is None and inputs.stack.build.venv_flavours == "installed-python":
        inputs = replace(inputs, layers=_with_installed_python(inputs.layers))
    if chosen.name == "venv":
        for layers in inputs.layers:
            _require_this_machine(layers.flavour)
            if not skip_sources and inputs.stack.toolchain.nvcc:
                require_venv_nvcc(inputs.stack.rules_in_effect, layers)
    tools = chosen.tools()
    cpus = effective_cpus()
    if dry_run:
        for layers in inputs.layers:
            _plan(layers, chosen.name, build_dir.absolute(), cpus, skip_sources, force)
        return []
    return [_build_one(inputs, layers, chosen, tools, build_dir.absolute(), cpus, skip_sources, force, signer) for layers in inputs.layers]


def _plan(layers: FlavourLayers, backend: str, build_dir: Path, cpus: float, skip_sources: bool, force: bool) -> None:
    """One line per flavour: what build would do (nothing is downloaded, nothing written)."""
    final = flavour_dir(build_dir, layers.flavour.slug, backend)
    if not force and _up_to_date(final, layers, backend, skip_sources) is not None:
        err.print(f"{layers.flavour.slug}: up to date ({final / 'build.json'}); would do nothing", highlight=False)
        return
    installs = ", ".join(
        f"{name} {len(layer.entries)}"
        for name, layer in (("toolchain", layers.toolchain), ("torch", layers.torch), ("extras", layers.extras))
        if layer.entries
    )
    compiles = ("left out (--skip-sources): " if skip_sources else "compile: ") + ", ".join(
        f"{s.component.key} (MAX_JOBS {max_jobs(cpus, budget_for(s.component))})" for s in layers.sources
    )
    err.print(
        f"{layers.flavour.slug}: would build with {backend} into {final}: install {installs or 'nothing'} package(s)"
        + (f"; {compiles}" if layers.sources else ""),
        highlight=False,
        soft_wrap=True,
    )


def _with_installed_python(layers: list[FlavourLayers]) -> list[FlavourLayers]:
    """The flavours whose Python this machine has ([build] venv_flavours = "installed-python"),
    each one left out named on a line; ToolMissingError when it has none of them."""
    kept = [one for one in layers if python_installed(one.flavour.python)]
    for one in layers:
        if one not in kept:
            err.print(
                f"{one.flavour.slug}: left out, no Python {one.flavour.python} on this machine "
                f'([build] venv_flavours = "installed-python"; --flavour {one.flavour.slug} builds it)',
                highlight=False,
            )
    if not kept:
        wanted = ", ".join(sorted({one.flavour.python for one in layers}))
        raise ToolMissingError(
            f"no flavour's Python is on this machine (the stack's flavours need Python {wanted})",
            hint="install one of them (the distribution's python3.X package, or 'uv python install 3.X'), or build "
            "one with --flavour SLUG, which lets uv download its Python",
        )
    for one in kept:
        err.print(f"{one.flavour.slug}: building on this machine's Python {one.flavour.python}", highlight=False)
    return kept


def _require_this_machine(flavour: Flavour) -> None:
    """A venv runs on the machine that builds it: an aarch64 flavour's wheels do not run on x86_64."""
    here = MACHINES.get(platform.machine().lower(), platform.machine().lower())
    if flavour.arch != here:
        raise UsageError(
            f"flavour {flavour.slug} is for {flavour.arch} and this machine is {here}: a venv runs where it is built",
            hint=f"build it on an {flavour.arch} machine, or as an image with --backend oci",
        )


MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}


def _build_one(
    inputs: Inputs,
    layers: FlavourLayers,
    backend: Backend,
    tools: dict[str, str],
    build_dir: Path,
    cpus: float,
    skip_sources: bool,
    force: bool,
    signer: Any = None,
) -> BuildRecord:
    slug = layers.flavour.slug
    final = flavour_dir(build_dir, slug, backend.name)
    try:
        return _build_locked(inputs, layers, backend, tools, build_dir, cpus, skip_sources, force, final, signer)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskSpaceError(
                f"{build_dir}: no space left on the device while building {slug}",
                hint="free some space; the previous build of this flavour is unchanged",
            ) from None
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise OutputError(
                f"{build_dir}: the build folder cannot be written ({describe_os_error(exc)}); nothing was "
                f"built for {slug}, the previous build, if any, is unchanged"
            ) from None
        raise


def _build_locked(
    inputs: Inputs,
    layers: FlavourLayers,
    backend: Backend,
    tools: dict[str, str],
    build_dir: Path,
    cpus: float,
    skip_sources: bool,
    force: bool,
    final: Path,
    signer: Any = None,
) -> BuildRecord:
    slug = layers.flavour.slug
    with _flavour_lock(build_dir, final.name):
        current = _up_to_date(final, layers, backend.name, skip_sources)
        if current is not None and not force and (signer is None or (final / FILES_RECORD).is_file()):
            err.print(Text.assemble(("✓", "green"), f" {slug}: up to date ({final / 'build.json'})"), highlight=False)
            if signer is not None:  # the build as recorded (files.json) is what the statement names
                err.print(f"signed {write_provenance(final, inputs, layers, current, signer)}", highlight=False)
            return current
        staging = build_dir / f".{final.name}.staging"
        _no_link(staging)
        shutil.rmtree(staging, ignore_errors=True)  # what a killed build left behind
        staging.mkdir(parents=True)
        try:
            record = _run(inputs, layers, backend, tools, staging, final, cpus, skip_sources)
            if signer is not None:
                write_provenance(staging, inputs, layers, record, signer)
            swap_into_place(staging, final)
        except KeyboardInterrupt:
            with no_interrupt():  # a second Ctrl-C does not leave the half-built staging folder behind
                shutil.rmtree(staging, ignore_errors=True)
            raise
        except BaseException as exc:
            full = isinstance(exc, OSError) and exc.errno == errno.ENOSPC
            error = (
                DiskSpaceError(
                    f"{build_dir}: no space left on the device while building {slug}",
                    hint="free some space; the previous build of this flavour is unchanged",
                )
                if full
                else exc
            )
            _keep_failed_logs(staging, final, error)
            shutil.rmtree(staging, ignore_errors=True)
            if full:
                raise error from None
            raise
    return record


def _keep_failed_logs(staging: Path, final: Path, exc: BaseException) -> Path | None:
    """Move a failed build's logs to <final>/logs/failed-<UTC time>/ (the staging folder is
    removed) and point the error at them; the previous good build is otherwise untouched."""
    logs = staging / "logs"
    if not logs.is_dir() or not any(logs.iterdir()):
        return None
    for part in staging.iterdir():  # the half-built environment first: on a full disk, room for the move
        if part == logs:
            continue
        if part.is_dir() and not part.is_symlink():
            shutil.rmtree(part, ignore_errors=True)
        else:
            part.unlink(missing_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    kept = final / "logs" / f"failed-{stamp}"
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(kept, ignore_errors=True)
        shutil.move(str(logs), str(kept))
    except OSError:
        return None
    if isinstance(exc, TrainstackError):
        where = f"logs in {kept}"
        exc.hint = (
            exc.hint.replace(str(logs), str(kept))
            if exc.hint and str(logs) in exc.hint
            else where
            if not exc.hint
            else f"{exc.hint}; {where}"
        )
    return kept


def flavour_dir(build_dir: Path, slug: str, backend: str) -> Path:
    """build/<slug>/ for a venv; build/<slug>.oci/ for an image's record, so neither replaces the other."""
    return build_dir / (slug if backend == "venv" else f"{slug}.{backend}")


def _run(
    inputs: Inputs,
    layers: FlavourLayers,
    backend: Backend,
    tools: dict[str, str],
    staging: Path,
    final: Path,
    cpus: float,
    skip_sources: bool,
) -> BuildRecord:
    started = dt.datetime.now(dt.timezone.utc)
    start = time.perf_counter()
    jobs = {s.component.key: max_jobs(cpus, budget_for(s.component)) for s in layers.sources}
    job = BuildJob(inputs, layers, staging, final, skip_sources, _ca_bundle(inputs), cpus, jobs)
    steps = Steps(staging, retries=inputs.stack.build.retries, shown_root=final)
    err.print(Text.assemble((layers.flavour.slug, "bold"), f" ({backend.name}): {cpus:g} CPUs"), highlight=False)
    err.print(
        Text(
            f"logs: {final / 'logs'} once built (while building: {staging / 'logs'}; "
            f"a failed build's under {final / 'logs'}/failed-<time>/)",
            style="dim",
        ),
        highlight=False,
        soft_wrap=True,
    )
    output = backend.build(job, steps)
    record = BuildRecord(
        stack=inputs.stack.stack.name,
        release=inputs.stack.stack.release,
        flavour=layers.flavour.slug,
        backend=backend.name,
        cache_key=layers.locked.cache_key,
        lock_sha256=layers.locked.lock_sha256,
        started_at=started.isoformat(timespec="seconds"),
        finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        seconds=round(time.perf_counter() - start, 3),
        cpus=cpus,
        max_jobs=jobs,
        skipped_sources=[s.component.key for s in layers.sources] if skip_sources else [],
        steps=steps.records,
        sizes=output.sizes,
        tools=tools,
        image=output.image,
        image_id=output.image_id,
        image_digest=output.image_digest,
        layers=output.layers,
        extensions=output.extensions,
    )
    atomic_write_json(staging / "build.json", record.model_dump(mode="json"))
    (staging / "build.json").chmod(0o644)  # a record for everyone, not only the builder
    return record


def _ca_bundle(inputs: Inputs) -> str | None:
    """build.ca_bundle from the stack (where the path rule lets it lead: the stack's folder or a
    system CA bundle), else SSL_CERT_FILE from the user's environment; must be a readable file."""
    value = inputs.stack.build.ca_bundle
    if value:
        try:
            path = stack_path(value, inputs.stack_path.parent, "build.ca_bundle")
        except ValueError as exc:
            raise SpecError(f"{inputs.stack_path}: build.ca_bundle: {exc}") from None
    else:
        value = os.environ.get("SSL_CERT_FILE")
        if not value:
            return None
        path = Path(value).expanduser()
    if not path.is_file():
        raise BuildError(f"build.ca_bundle: {path} is not a file", hint="give a PEM bundle or leave ca_bundle unset")
    return str(path)


def _up_to_date(final: Path, layers: FlavourLayers, backend: str, skip_sources: bool) -> BuildRecord | None:
    """The existing venv's record when it was built from the same lock with the same options.

    Images are always handed to the builder again: its layer cache makes that cheap, and it
    notices an image that was removed from the store since.
    """
    if backend != "venv":
        return None
    try:
        record = BuildRecord.model_validate_json((final / "build.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    same = (
        record.backend == backend
        and record.lock_sha256 == layers.locked.lock_sha256
        and record.cache_key == layers.locked.cache_key
        and bool(record.skipped_sources) == (skip_sources and bool(layers.sources))
    )
    if not (final / "venv" / "bin" / "python").exists():
        return None
    return record if same else None


def _no_link(path: Path) -> None:
    """BuildError when ``path``, a name of the build's own in the build folder, is a link: the
    build writes and removes its own files there through no link."""
    if path.is_symlink():
        raise BuildError(
            f"{path}: a link in the build folder (to {os.readlink(path)}); a build writes its own files there, never through a link",
            hint=f"remove the link ({path}); the build makes its own",
        )


@contextmanager
def _flavour_lock(build_dir: Path, slug: str) -> Iterator[None]:
    """One build per flavour at a time: a second one fails at once instead of racing for the swap."""
    build_dir.mkdir(parents=True, exist_ok=True)
    lock = build_dir / f".{slug}.lock"
    _no_link(lock)
    try:  # never through a link, never truncating: a link planted since is refused by the kernel
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        _no_link(lock)
        raise BuildError(f"{lock}: cannot open the build's lock file: {describe_os_error(exc)}") from None
    with os.fdopen(fd, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BusyError(
                f"{build_dir / slug}: another build of this flavour is running; nothing was done",
                hint="wait for it to finish, or build into another --build-dir",
            ) from None
        yield

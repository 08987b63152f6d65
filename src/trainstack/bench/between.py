"""The environments between two locked releases of a stack, built with uv, one component group
changed at a time (bench.attribute plans the groups).

The base is the previous release's lock and the last step the new release's lock, each installed
as locked; a step in between is resolved by uv with the components of the groups so far at their
new versions, the others at their old ones, and every other package kept where the previous lock
pinned it (uv's preferences: the previous pins prefilled into the output) unless the step needs it
to move. A step uv cannot resolve is named with uv's reason and joined to the next group.
Environments are uv venvs under a work folder, linked from uv's cache: cheap after the first.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from trainstack import proc
from trainstack.bench.attribute import TORCH_GROUP, Group, merged
from trainstack.console import err
from trainstack.errors import BuildError, LockError, SpecError, UsageError
from trainstack.fsutil import atomic_write_text
from trainstack.lock import check_lock_current
from trainstack.lock.lockfile import parse_lock
from trainstack.lock.manifest import MANIFEST_NAME, LockedFlavour, Manifest, load_manifest, manifest_path, read_lock_text
from trainstack.lock.resolve import condense
from trainstack.release.diff import match_flavours
from trainstack.stackfile import load_stack

UV_TIMEOUT_S = 1800.0  # a cold cache downloads a CUDA torch's libraries


@dataclass(frozen=True)
class Release:
    """One side of the attribution: a locked flavour, its lock text and the stack's components."""

    where: Path  # the stack file or the manifest given
    manifest: Manifest
    slug: str
    flavour: LockedFlavour
    lock_text: str
    components: tuple[str, ...]  # canonical names; () for a manifest given alone

    @property
    def packages(self) -> dict[str, str]:
        return {canonicalize_name(k): v for k, v in self.flavour.packages.items()}


def load_release(path: Path, option: str) -> tuple[Manifest, Path, tuple[str, ...]]:
    """A stack file (its lock checked current) or a stack.lock.json: the manifest, its lock folder
    and the stack's component names."""
    if path.suffix == ".toml":
        stack = load_stack(path)
        manifest = check_lock_current(path)
        return manifest, manifest_path(path).parent, tuple(canonicalize_name(c.key) for c in stack.components.values())
    if path.name == MANIFEST_NAME or path.suffix == ".json":
        return load_manifest(path), path.parent, ()
    raise UsageError(f"{option} {path}: accepted: a stack file (.toml, with its lock folder) or its {MANIFEST_NAME}")


def releases(previous: Path, current: Path, flavour: str | None) -> tuple[Release, Release]:
    """Both sides, on a flavour of the new release (``flavour``, or the only one that follows one of
    the previous release): the same slug, or the one it follows across a CUDA or OS move
    (release.diff's matching, as the release notes pair them)."""
    sides = [load_release(previous, "--attribute"), load_release(current, "--attribute")]
    follows = match_flavours(sides[0][0], sides[1][0])  # new slug -> the previous release's
    common = [slug for slug in sides[1][0].flavours if slug in follows]

    def named(slug: str) -> str:
        return slug if follows[slug] == slug else f"{slug} (after {follows[slug]})"

    if flavour is not None:
        slug = flavour.replace(".", "")
        if slug not in common:
            raise UsageError(
                f"--flavour {flavour}: not a flavour of the new release that follows one of the previous; "
                f"accepted: {', '.join(named(s) for s in common) or 'none'}"
            )
    elif len(common) == 1:
        slug = common[0]
    else:
        raise UsageError(
            f"--attribute: the releases share {len(common)} flavours; pick one with --flavour "
            f"(accepted: {', '.join(named(s) for s in common) or 'none'})"
        )
    made = []
    for (manifest, folder, components), where, side_slug in zip(sides, (previous, current), (follows[slug], slug)):
        entry = manifest.flavours[side_slug]
        try:
            text = read_lock_text(folder, entry.lock_file)
        except FileNotFoundError:
            raise LockError(f"{folder / entry.lock_file}: missing", hint=f"re-lock {where}") from None
        if hashlib.sha256(text.encode()).hexdigest() != entry.lock_sha256:
            raise LockError(f"{folder / entry.lock_file}: changed since it was locked", hint=f"re-lock {where}")
        made.append(Release(where, manifest, side_slug, entry, text, components))
    if made[0].flavour.python != made[1].flavour.python:
        raise SpecError(
            f"flavour {named(slug)}: Python {made[0].flavour.python} in {previous}, {made[1].flavour.python} in {current}; "
            "accepted: releases whose flavour has one Python"
        )
    return made[0], made[1]


@dataclass(frozen=True)
class Built:
    """The steps as built (groups joined where a finer step could not be resolved) and each
    environment's Python: the base's first, then one per step."""

    groups: tuple[Group, ...]
    pythons: tuple[Path, ...]
    unresolved: tuple[str, ...]


def build_steps(before: Release, after: Release, groups: list[Group], work: Path, over: Over | None = None) -> Built:
    """The base, each step between and the new release, as venvs under ``work`` (each over
    ``over``'s packages where given)."""
    work.mkdir(parents=True, exist_ok=True)
    python = before.flavour.python
    pythons = [_venv_from_text(work, "base", before.lock_text, python, over)]
    built: list[Group] = []
    unresolved: list[str] = []
    pending: Group | None = None
    components = tuple(dict.fromkeys(after.components + before.components))
    for index, group in enumerate(groups):
        step = merged(pending, group, pending.note or "") if pending is not None else group
        if index == len(groups) - 1:
            pythons.append(_venv_from_text(work, "release", after.lock_text, python, over))
            built.append(step)
            break
        applied = [c for g in [*built, step] for c in g.changes]
        resolved, why = _resolve(work, before, after, components, applied, python)
        if resolved is None:
            reason = f"+{step.name} alone does not resolve: {why}"
            err.print(f"warning: {reason}; joined to the next step", highlight=False, markup=False, soft_wrap=True)
            unresolved.append(reason)
            pending = Group(step.name, step.changes, reason)
            continue
        pythons.append(_venv_from_text(work, f"step{index + 1}", resolved, python, over))
        built.append(step)
        pending = None
    return Built(tuple(built), tuple(pythons), tuple(unresolved))


def _requirements(before: Release, after: Release, components: tuple[str, ...], applied: list) -> str:
    """The index options of both locks, then every component (and the torch group) pinned: at its
    new version where its group is applied, else at its old one."""
    moved = {c.name for c in applied}
    options = dict.fromkeys(parse_lock(after.lock_text).options + parse_lock(before.lock_text).options)
    pinned = {}
    for name in dict.fromkeys([*components, *(n for n in {**before.packages, **after.packages} if TORCH_GROUP.match(n))]):
        version = (after if name in moved else before).packages.get(name)
        if version is not None:
            pinned[name] = version
    return "".join(f"{o}\n" for o in options) + "".join(f"{n}=={v}\n" for n, v in sorted(pinned.items()))


def _resolve(
    work: Path, before: Release, after: Release, components: tuple[str, ...], applied: list, python: str
) -> tuple[str | None, str | None]:
    """The step's pins (uv pip compile, the previous pins as preferences): (the text, None), or
    (None, uv's reason in one line)."""
    request = _requirements(before, after, components, applied)
    folder = work / f"resolve-{hashlib.sha256(request.encode()).hexdigest()[:12]}"
    folder.mkdir(exist_ok=True)
    atomic_write_text(folder / "requirements.in", request)
    preferences = "".join(f"{n}=={v}\n" for n, v in sorted(before.packages.items()))
    atomic_write_text(folder / "requirements.txt", preferences)  # uv keeps these pins unless the step needs others
    result = proc.run(
        [
            "uv",
            "pip",
            "compile",
            "--quiet",
            "--no-header",
            "--python-version",
            python,
            folder / "requirements.in",
            "-o",
            folder / "requirements.txt",
        ],
        timeout=UV_TIMEOUT_S,
    )
    if not result.ok:
        return None, condense(result.stderr, list(components))
    options = "".join(f"{o}\n" for o in parse_lock(request).options)
    return options + (folder / "requirements.txt").read_text(encoding="utf-8"), None


@dataclass(frozen=True)
class Over:
    """An interpreter whose packages every step's venv sees after its own (``--over``): what the
    locks leave out, torch and its CUDA libraries in an image that ships them, comes from there."""

    python: Path
    site: tuple[str, ...]  # its site-packages folders, in its own order


OVER_PROBE = "import json, site, sys; print(json.dumps([f'{sys.version_info[0]}.{sys.version_info[1]}', site.getsitepackages()]))"


def over_python(path: Path, python: str) -> Over:
    """``--over PYTHON``: an interpreter of the flavour's Python, its site-packages folders; refused in one line."""
    if not path.is_file():
        raise UsageError(f"--over {path}: no such Python interpreter; accepted: an interpreter whose packages the steps see")
    try:
        result = proc.run([str(path.absolute()), "-c", OVER_PROBE], env={"PYTHONPATH": ""}, echo=False, timeout=120.0)
    except OSError as exc:
        raise UsageError(f"--over {path}: does not run ({exc.strerror or exc}); accepted: a Python interpreter") from None
    if not result.ok:
        raise UsageError(f"--over {path}: does not run as a Python interpreter (exit {result.returncode}); accepted: a Python interpreter")
    version, site = json.loads(result.stdout.strip().splitlines()[-1])
    if version != python:
        raise SpecError(f"--over {path}: Python {version}; the flavour's is {python}; accepted: an interpreter of Python {python}")
    return Over(path.absolute(), tuple(str(s) for s in site))


def _venv_from_text(work: Path, name: str, body: str, python: str, over: Over | None = None) -> Path:
    """A venv holding exactly ``body``'s pins (a lock, or a step's resolution), reused when a
    previous run made it from the same pins; over ``over``'s site-packages (a .pth after its own)."""
    seen = "" if over is None else f"over {over.python}\n" + "".join(f"{s}\n" for s in over.site)
    digest = hashlib.sha256(f"{python}\n{seen}{body}".encode()).hexdigest()[:12]
    venv = work / f"{name}-{digest}"
    ready = venv / "trainstack-step-ready"
    interpreter = venv / "bin" / "python"
    if ready.is_file() and not ready.is_symlink():
        return interpreter
    shutil.rmtree(venv, ignore_errors=True)
    atomic_write_text(work / f"{name}-{digest}.txt", body)
    for argv in (
        ["uv", "venv", "--quiet", "--python", str(python if over is None else over.python), str(venv)],
        ["uv", "pip", "sync", "--quiet", "--python", str(interpreter), str(work / f"{name}-{digest}.txt")],
    ):
        result = proc.run(argv, timeout=UV_TIMEOUT_S)
        if not result.ok:
            last = [line for line in result.stderr.strip().splitlines() if line.strip()][-1:] or [f"exit {result.returncode}"]
            raise BuildError(f"environment {name} ({work / f'{name}-{digest}.txt'}): {last[0][:300]}")
    if over is not None:  # site.addsitedir: the folders' own .pth files count too; they come after the venv's
        (site_packages,) = (venv / "lib").glob("python*/site-packages")
        atomic_write_text(site_packages / "zz-trainstack-over.pth", "".join(f"import site; site.addsitedir({s!r})\n" for s in over.site))
    ready.touch()
    return interpreter

"""The lock manifest (stack.lock.json), where lock files live, and what a lock folder may hold.

A lock folder is committed beside its stack and arrives in pull requests like the stack: every
value keys, render and build take from it is checked here first (file names inside the folder,
hashes, versions, index URLs without credentials, requirement lines by name with their hashes;
direct references only for the stack's own source components). No resolution.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from trainstack import grammar
from trainstack.errors import LockError, SpecError
from trainstack.fsutil import describe_os_error, loads_strict, read_regular

SCHEMA_VERSION = 1
MANIFEST_NAME = "stack.lock.json"
LOCK_FILE = re.compile(r"^locks/[A-Za-z0-9][A-Za-z0-9._-]*\.txt\Z")  # inside the lock folder, no '..'
SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
SLUG = re.compile(r"^[a-z0-9][a-z0-9.-]*\Z")
CACHE_KEY = re.compile(r"^[a-z0-9][a-z0-9._/-]*-[0-9a-f]{12}\Z")
SETTING = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}\Z")
LAYER = re.compile(r"^[a-z][a-z0-9-]*\Z")
GIT_PIN = re.compile(r"^git\+(?P<url>.+)@(?P<sha>[0-9a-f]{40})\Z")
HASH_LINE = re.compile(r"^--hash=sha256:[0-9a-f]{64}\Z")
OPTIONS = ("--index-url", "--extra-index-url", "--find-links")  # what uv writes into a lock
OneLine = Annotated[str, AfterValidator(grammar.no_controls)]  # a value the manifest records as it was given


def _pinned_source(value: str) -> str:
    """'git+URL@FULLSHA' with a git URL, or 'file:///ABS/PATH' (what the lock writes for sources)."""
    grammar.no_controls(value)
    found = GIT_PIN.fullmatch(value)
    if found:
        grammar.git_url(found.group("url"))
        return value
    if value.startswith("file:///") and not value.startswith("file:////") and " " not in value:
        return value
    raise ValueError(f"'{grammar.shown(value)}' is not a pinned source ('git+URL@<40 hex>' or 'file:///PATH')")


AXIS = re.compile(r"^[a-z0-9][a-z0-9.]*\Z")
_AXIS_ACCEPTED = "a matrix value ('12.8', 'cpu', 'debian12', '3.12', 'release')"
_SHA_ACCEPTED = "a sha256 (64 lowercase hex digits)"
# the flavour's one-line values: the pattern each must match and what it accepts
FLAVOUR_PATTERNS = {
    "cuda": (AXIS, _AXIS_ACCEPTED),
    "os": (AXIS, _AXIS_ACCEPTED),
    "python": (AXIS, _AXIS_ACCEPTED),
    "channel": (AXIS, _AXIS_ACCEPTED),
    "lock_file": (LOCK_FILE, "a lock file of the folder ('locks/<flavour>.txt')"),
    "lock_sha256": (SHA256, _SHA_ACCEPTED),
    "inputs_hash": (SHA256, _SHA_ACCEPTED),
    "cache_key": (CACHE_KEY, "a cache key ('<image>-<flavour>-<12 hex>')"),
}


class LockedFlavour(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cuda: str
    os: str
    python: str
    channel: str
    arch: Literal["x86_64", "aarch64"] = "x86_64"
    lock_file: str  # relative to the lock directory: "locks/<slug>.txt"
    lock_sha256: str  # of the lock file's bytes
    index: (
        Annotated[str, AfterValidator(grammar.index_url)] | None
    )  # the CUDA-variant index the flavour resolved against (None: default index)
    cache_key: str  # "<image>-<slug>-<12 hex>"
    packages: dict[str, str]  # canonical name -> resolved version
    sources: dict[str, str] = {}  # canonical name -> "git+URL@SHA" or "file://..." for non-index sources
    # layer/group name -> its own lock file (relative to the lock directory), each a subset
    # consistent with lock_file: "torch" (torch, vision, audio, triton, numpy and their deps)
    # and "toolchain" (ninja, cmake, nvcc wheels for ahead-of-time extension builds)
    layers: dict[str, str] = {}
    inputs_hash: str = ""  # sha256 of this flavour's resolution inputs (uv requests, sources)
    # what the release notes diff besides versions; "" and {} in manifests written before they were recorded
    base_image: Annotated[str, Field(max_length=500), AfterValidator(grammar.no_controls)] = (
        ""  # the image (or debootstrap suite) it builds on
    )
    # system packages, each component's build_env (DS_BUILD_* flags among them) and job budget, the compiler cache
    build_settings: Annotated[dict[str, Annotated[str, Field(max_length=2000)]], Field(max_length=1000)] = {}

    @field_validator("build_settings")
    @classmethod
    def _settings(cls, value: dict[str, str]) -> dict[str, str]:
        for name, setting in value.items():
            grammar.matching(name, SETTING, "a build setting name ('compiler_cache', 'deepspeed.DS_BUILD_OPS')")
            grammar.no_controls(setting)
        return value

    @field_validator(*FLAVOUR_PATTERNS)
    @classmethod
    def _pattern(cls, value: str, info: ValidationInfo) -> str:
        if info.field_name == "inputs_hash" and not value:  # locks before inputs were hashed
            return value
        pattern, accepted = FLAVOUR_PATTERNS[str(info.field_name)]
        return grammar.matching(value, pattern, accepted)

    @field_validator("packages", "sources")
    @classmethod
    def _pins(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        check = grammar.version if info.field_name == "packages" else _pinned_source
        for name, pinned in value.items():
            grammar.pep508_name(name)
            check(pinned)
        return value

    @field_validator("layers")
    @classmethod
    def _layers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, relative in value.items():
            grammar.matching(name, LAYER, "a layer name ('torch', 'toolchain')")
            grammar.matching(relative, LOCK_FILE, "a lock file of the folder ('locks/<flavour>.<layer>.txt')")
        return value


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    stack: OneLine
    release: Annotated[str, AfterValidator(grammar.oci_tag)]
    image: OneLine  # registry/image, as in StackInfo.image_ref
    inputs_hash: str  # sha256 of the stack file's resolved inputs (what makes the lock)
    uv_version: OneLine
    generated_at: OneLine  # ISO time; excluded from inputs_hash, kept when inputs are unchanged
    flavours: dict[str, LockedFlavour]  # slug -> locked flavour

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(f"{value} is not a schema this trainstack reads; accepted: {SCHEMA_VERSION}")
        return value

    @field_validator("inputs_hash")
    @classmethod
    def _inputs(cls, value: str) -> str:
        return grammar.matching(value, SHA256, _SHA_ACCEPTED)

    @field_validator("flavours")
    @classmethod
    def _slugs(cls, value: dict[str, LockedFlavour]) -> dict[str, LockedFlavour]:
        for slug in value:
            grammar.matching(slug, SLUG, "a flavour slug ('cu128-ubuntu2404-py312-release')")
        return value


def lock_dir(stack_path: Path) -> Path:
    """Lock output of examples/stacks/cpu-minimal.toml: examples/stacks/cpu-minimal.lock/."""
    return stack_path.parent / f"{stack_path.stem}.lock"


def manifest_path(stack_path: Path) -> Path:
    return lock_dir(stack_path) / MANIFEST_NAME


def load_manifest(path: Path) -> Manifest:
    """Read a stack.lock.json; LockError when missing, SpecError when it is anything but a
    manifest (a directory, a FIFO, binary data, invalid or too deeply nested JSON, NaN)."""
    try:
        data = loads_strict(read_regular(path, "lock manifest", inside=path.parent).decode("utf-8"))
    except FileNotFoundError:
        raise LockError(f"{path}: no lock manifest", hint="run 'trainstack lock STACK' first") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {describe_os_error(exc)}") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a lock manifest: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:  # NaN or Infinity
        raise SpecError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: not a lock manifest: nested too deeply") from None
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"]]
        field = ".".join(grammar.shown(p) for p in loc) or "(top level)"
        message = grammar.shown(str(first["msg"]).removeprefix("Value error, "), 300)
        line = _json_line(read_regular(path, "lock manifest", inside=path.parent).decode("utf-8"), loc)
        raise SpecError(f"{path}:{line}: {field}: {message}" if line else f"{path}: {field}: {message}") from None


def _json_line(text: str, loc: list[str]) -> int | None:
    """The line of the deepest key of ``loc`` found in order in a JSON text (1-based)."""
    lines = text.splitlines()
    found, start = None, 0
    for key in loc:
        quoted = json.dumps(key) + ":"
        hit = next((n for n in range(start, len(lines)) if quoted in lines[n]), None)
        if hit is None:
            break
        found, start = hit + 1, hit + 1
    return found


PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class DeclaredIndexes:
    """The index options a flavour's lock may hold: the stack's own indexes (index url, extra
    indexes with the flavour's CUDA-variant index, find-links), nothing else. With no index url
    declared, the lock's --index-url is PyPI's or the default index of the environment that
    locked it (a mirror set in UV_DEFAULT_INDEX or UV_INDEX_URL)."""

    index_url: tuple[str, ...]
    extra_index_url: tuple[str, ...]
    find_links: tuple[str, ...]

    @classmethod
    def of(cls, index_url: str | None, extra: Sequence[str], find_links: Sequence[str], environment_default: str | None) -> DeclaredIndexes:
        defaults = (index_url,) if index_url is not None else (PYPI, *([environment_default] if environment_default else []))
        return cls(tuple(defaults), tuple(extra), tuple(find_links))

    def check(self, flag: str, value: str) -> None:
        """ValueError unless ``flag value`` is one of the declared indexes."""
        declared = {"--index-url": self.index_url, "--extra-index-url": self.extra_index_url, "--find-links": self.find_links}[flag]
        if value.rstrip("/") in {url.rstrip("/") for url in declared}:
            return
        field = {"--index-url": "index.url", "--extra-index-url": "index.extra", "--find-links": "index.find_links"}[flag]
        accepted = ", ".join(declared) if declared else "none"
        raise ValueError(
            f"'{grammar.shown(flag + ' ' + value, 200)}' names an index the stack does not declare in {field} "
            f"(accepted for {flag}: {grammar.shown(accepted, 200)}); re-lock after declaring it in the stack"
        )


def read_lock_text(lock_dir: Path, relative: str, direct: Collection[str] = (), indexes: DeclaredIndexes | None = None) -> str:
    """A lock file named by the manifest: a regular file inside ``lock_dir`` (symbolic links may
    not lead out), every line checked by ``check_lock_text``."""
    path = lock_dir / relative
    try:
        grammar.matching(relative, LOCK_FILE, "a lock file of the folder ('locks/<flavour>.txt')")
    except ValueError as exc:
        raise SpecError(f"{lock_dir / MANIFEST_NAME}: {exc}") from None
    try:
        text = read_regular(path, "lock file", inside=lock_dir, folder_name="lock folder").decode("utf-8")
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {describe_os_error(exc)}") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a lock file: not UTF-8 text") from None
    check_lock_text(text, path, direct, indexes)
    return text


def check_lock_text(text: str, path: Path, direct: Collection[str] = (), indexes: DeclaredIndexes | None = None) -> None:
    """Each line of a requirements lock is a comment, an index option with a URL without
    credentials, a pinned requirement by name (``name==version``, with a marker at most), a
    ``--hash=sha256:`` line under it, or a direct reference ('name @ git+URL@SHA' or
    'name @ file:///PATH') for a name in ``direct`` (the stack's source components) only; with
    ``indexes``, each index option names one the stack declares. Lines end at "\\n" alone: a
    carriage return, vertical tab, form feed, U+0085 or U+2028 inside a line is refused, never
    taken for a line break. SpecError 'FILE:LINE: what: why' for anything else."""
    allowed = {canonicalize_name(n) for n in direct}
    in_entry = False
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip(" ")
        stripped = line.strip(" ").removesuffix("\\").strip(" ")
        try:
            grammar.no_controls(raw)
            if not stripped or stripped.startswith("#"):
                continue
            if line[0] == " ":
                if not in_entry or not HASH_LINE.fullmatch(stripped):
                    raise ValueError(f"'{grammar.shown(stripped)}' is not a hash of the entry above ('--hash=sha256:<64 hex>')")
                continue
            in_entry = False
            if stripped.startswith("-"):
                _option(stripped, indexes)
                continue
            _requirement(stripped, allowed)
            in_entry = True
        except ValueError as exc:
            raise SpecError(f"{path}:{number}: lock line: {exc}") from None


def _option(line: str, indexes: DeclaredIndexes | None) -> None:
    flag, _, value = line.partition(" ")
    if flag not in OPTIONS or value != value.strip(" ") or not value:
        raise ValueError(f"'{grammar.shown(line)}' is not an option a lock holds (accepted: {', '.join(OPTIONS)} with a URL)")
    grammar.index_url(value)
    if indexes is not None:
        indexes.check(flag, value)


def _requirement(line: str, direct: AbstractSet[str]) -> None:
    try:
        parsed = Requirement(line)
    except InvalidRequirement:
        raise ValueError(f"'{grammar.shown(line)}' is not a pinned requirement ('name==version')") from None
    grammar.pep508_name(parsed.name)
    if parsed.url is not None:
        if canonicalize_name(parsed.name) not in direct:
            raise ValueError(
                f"'{grammar.shown(line)}': a direct reference for '{parsed.name}', which the stack does not build "
                "from source (accepted: 'name==version' with hashes)"
            )
        _pinned_source(parsed.url)
        return
    pins = list(parsed.specifier)
    if len(pins) != 1 or pins[0].operator != "==" or parsed.extras:
        raise ValueError(f"'{grammar.shown(line)}' is not a pinned requirement ('name==version')")
    grammar.version(pins[0].version)

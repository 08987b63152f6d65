"""The lock manifest (stack.lock.json) and where lock files live. Pure data; no resolution."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from trainstack.errors import LockError, SpecError
from trainstack.fsutil import describe_os_error, loads_strict, read_regular

SCHEMA_VERSION = 1
MANIFEST_NAME = "stack.lock.json"


class LockedFlavour(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cuda: str
    os: str
    python: str
    channel: str
    lock_file: str  # relative to the lock directory: "locks/<slug>.txt"
    lock_sha256: str  # of the lock file's bytes
    index: str | None  # the CUDA-variant index the flavour resolved against (None: default index)
    cache_key: str  # "<image>-<slug>-<12 hex>"
    packages: dict[str, str]  # canonical name -> resolved version
    sources: dict[str, str] = {}  # canonical name -> "git+URL@SHA" or "file://..." for non-index sources
    # layer/group name -> its own lock file (relative to the lock directory), each a subset
    # consistent with lock_file: "torch" (torch, vision, audio, triton, numpy and their deps)
    # and "toolchain" (ninja, cmake, nvcc wheels for ahead-of-time extension builds)
    layers: dict[str, str] = {}
    inputs_hash: str = ""  # sha256 of this flavour's resolution inputs (uv requests, sources)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    stack: str
    release: str
    image: str  # registry/image, as in StackInfo.image_ref
    inputs_hash: str  # sha256 of the stack file's resolved inputs (what makes the lock)
    uv_version: str
    generated_at: str  # ISO time; excluded from inputs_hash, kept when inputs are unchanged
    flavours: dict[str, LockedFlavour]  # slug -> locked flavour

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(f"{value} is not a schema this trainstack reads; accepted: {SCHEMA_VERSION}")
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
        data = loads_strict(read_regular(path, "lock manifest").decode("utf-8"))
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
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise SpecError(f"{path}: {field}: {message}") from None

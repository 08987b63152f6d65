"""Pydantic models of stack.toml. Pure data and validation; no I/O."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

CUDA_RE = re.compile(r"^(cpu|\d+\.\d+)$")
PYTHON_RE = re.compile(r"^3\.\d+$")
OS_RE = re.compile(r"^[a-z]+[0-9.]*$")
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Channel = Literal["release", "nightly"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _specifier(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"'{value}' is not a version specifier (try '==2.9.1' or '>=2.8,<2.10')") from None
    return value


class StackInfo(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]
    release: Annotated[str, Field(min_length=1)]
    image: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._/-]*$")]
    registry: str = ""
    description: str = ""

    @property
    def image_ref(self) -> str:
        return f"{self.registry.rstrip('/')}/{self.image}" if self.registry else self.image


class Indexes(Strict):
    url: str | None = None
    extra: list[str] = []
    find_links: list[str] = []


class JobBudget(Strict):
    divisor: Annotated[int, Field(ge=1)]
    cap: Annotated[int, Field(ge=1)]


class FlavourFilter(Strict):
    """Restricts a component to some flavours: each given field must match."""

    cuda: str | None = None
    os: list[str] | None = None
    python: str | None = None
    channel: Channel | None = None

    @field_validator("cuda", "python")
    @classmethod
    def _specifiers(cls, v: str | None) -> str | None:
        return None if v is None else _specifier(v)


class Component(Strict):
    name: str = ""
    version: str | None = None
    git: str | None = None
    commit: str | None = None
    path: str | None = None
    source: Literal["wheel", "sdist"] = "wheel"
    extras: list[str] = []
    build_env: dict[str, str] = {}
    jobs: JobBudget | None = None
    when: FlavourFilter | None = None
    group: Literal["torch", "extras", "toolchain"] | None = None
    # Requires-Dist of a source build, read at lock time instead of building it (an
    # sdist whose metadata needs torch to generate, or a git/path source not fetched)
    requires: list[str] | None = None

    @field_validator("version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        return None if v is None else _specifier(v)

    @field_validator("commit")
    @classmethod
    def _commit(cls, v: str | None) -> str | None:
        if v is not None and not SHA_RE.match(v):
            raise ValueError(f"'{v}' is not a git commit (7 to 40 lowercase hex digits)")
        return v

    @field_validator("requires")
    @classmethod
    def _requires(cls, v: list[str] | None) -> list[str] | None:
        for item in v or []:
            try:
                Requirement(item)
            except InvalidRequirement:
                raise ValueError(f"'{item}' is not a requirement (try 'einops' or 'torch>=2.4')") from None
        return v

    @field_validator("build_env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not ENV_NAME_RE.match(key):
                raise ValueError(f"'{key}' is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> Component:
        given = [k for k in ("version", "git", "path") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of version, git or path, not {' and '.join(given)}")
        if self.git is not None and self.commit is None:
            raise ValueError("a git source needs 'commit' pinned to a full or short sha")
        if self.commit is not None and self.git is None:
            raise ValueError("'commit' needs 'git'")
        if self.requires is not None:
            if not self.is_source_build:
                raise ValueError("'requires' is for source builds only (source = \"sdist\", git or path)")
            if self.git is None and self.path is None and self.pinned_version is None:
                raise ValueError("'requires' needs an exact version such as '==2.8.3': it describes one release")
        return self

    @property
    def pinned_version(self) -> str | None:
        """'2.8.3' for version '==2.8.3'; None for ranges or wildcards."""
        spec = list(SpecifierSet(self.version or ""))
        if len(spec) == 1 and spec[0].operator in ("==", "===") and "*" not in spec[0].version:
            return spec[0].version
        return None

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @property
    def is_source_build(self) -> bool:
        return self.source == "sdist" or self.git is not None or self.path is not None

    def requirement(self) -> str:
        """The PEP 508 line uv resolves for this component."""
        extras = f"[{','.join(sorted(self.extras))}]" if self.extras else ""
        if self.git is not None:
            return f"{self.name}{extras} @ git+{self.git}@{self.commit}"
        if self.path is not None:
            return f"{self.name}{extras} @ file://{self.path}"
        return f"{self.name}{extras}{self.version or ''}"


class ExcludeCell(Strict):
    cuda: str | None = None
    os: str | None = None
    python: str | None = None
    channel: Channel | None = None


class IncludeCell(Strict):
    cuda: str
    os: str
    python: str
    channel: Channel = "release"


class Matrix(Strict):
    cuda: list[str]
    os: list[str]
    python: list[str]
    channel: list[Channel] = ["release"]
    exclude: list[ExcludeCell] = []
    include: list[IncludeCell] = []

    @model_validator(mode="after")
    def _cells_name_axis_values(self) -> Matrix:
        for number, cell in enumerate(self.exclude):
            for axis, value in cell.model_dump(exclude_none=True).items():
                allowed = getattr(self, axis)
                if value not in allowed:
                    raise ValueError(
                        f"exclude[{number}]: {axis} '{value}' is not on the matrix (one of: {', '.join(allowed)})"
                    )
        return self

    @field_validator("cuda")
    @classmethod
    def _cuda(cls, v: list[str]) -> list[str]:
        for item in v:
            if not CUDA_RE.match(item):
                raise ValueError(f"'{item}' is not a CUDA version (try '12.8' or 'cpu')")
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v: list[str]) -> list[str]:
        for item in v:
            if not PYTHON_RE.match(item):
                raise ValueError(f"'{item}' is not a Python version (try '3.12')")
        return v

    @field_validator("os")
    @classmethod
    def _os(cls, v: list[str]) -> list[str]:
        for item in v:
            if not OS_RE.match(item):
                raise ValueError(f"'{item}' is not an OS name (try 'ubuntu24.04' or 'debian12')")
        return v


class CompilerCache(Strict):
    kind: Literal["ccache", "sccache", "none"] = "ccache"
    dir: str = ".cache/compiler"
    max_size: Annotated[str, Field(pattern=r"^\d+(\.\d+)?[KMGT]$")] = "10G"


class Build(Strict):
    base: dict[str, str] = {}
    system_packages: list[str] = []
    min_free_disk_gb: Annotated[float, Field(ge=0)] = 10.0
    compiler_cache: CompilerCache = CompilerCache()
    retries: Annotated[int, Field(ge=1, le=20)] = 4
    ca_bundle: str | None = None


class Toolchain(Strict):
    packages: list[str] = ["ninja", "cmake"]
    nvcc: bool = True


class Suite(Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    command: Annotated[str, Field(min_length=1)]
    max_failed: Annotated[int, Field(ge=0)] = 0
    timeout: Annotated[float, Field(gt=0)] = 1800.0
    rerun_failed: bool = True


class Links(Strict):
    banned: list[str] = []
    required: list[str] = []
    allow_stubs_rpath: bool = False


class Verify(Strict):
    smoke: list[str] = ["imports", "matmul", "sdpa", "compile", "cpp_extension", "distributed"]
    suite: list[Suite] = []
    known_issues: str | None = None
    max_failed_tests: Annotated[int, Field(ge=0)] = 0
    links: Links = Links()


class Bench(Strict):
    preset: str = "1b"
    batch: Annotated[int, Field(ge=1)] = 4
    seq: Annotated[int, Field(ge=16)] = 4096
    steps: Annotated[int, Field(ge=1)] = 20
    warmup: Annotated[int, Field(ge=0)] = 5
    modes: list[str] = ["eager", "compile"]


class Stack(Strict):
    stack: StackInfo
    index: Indexes = Indexes()
    components: dict[str, Component]
    matrix: Matrix
    build: Build = Build()
    toolchain: Toolchain = Toolchain()
    verify: Verify = Verify()
    bench: Bench = Bench()

    @field_validator("components", mode="before")
    @classmethod
    def _expand_short_form(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        expanded = {}
        for name, item in value.items():
            if isinstance(item, str):
                item = {"version": item} if item not in ("", "*") else {}
            if isinstance(item, dict):
                item = {"name": name, **item}
            expanded[name] = item
        return expanded

    @model_validator(mode="after")
    def _unique_component_keys(self) -> Stack:
        seen: dict[str, str] = {}
        for name, comp in self.components.items():
            if comp.key in seen:
                raise ValueError(f"components '{seen[comp.key]}' and '{name}' name the same package")
            seen[comp.key] = name
        if not self.components:
            raise ValueError("a stack needs at least one component")
        return self

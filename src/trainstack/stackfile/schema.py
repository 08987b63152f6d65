"""Pydantic models of stack.toml. Pure data and validation; no I/O."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from trainstack import grammar
from trainstack.errors import SpecError, UsageError
from trainstack.nn.modes import parse_mode
from trainstack.nn.presets import SHAPES
from trainstack.rules.data import shipped_rules
from trainstack.rules.schema import Rules
from trainstack.stackfile.bases import parse_key as parse_base_key
from trainstack.trust import credential_name, holds_userinfo, is_pytest_command, reserved_name, runs_code

CUDA_RE = re.compile(r"^(cpu|\d+\.\d+)\Z")
PYTHON_RE = re.compile(r"^3\.\d+\Z")
OS_RE = re.compile(r"^[a-z]+[0-9.]*\Z")
SHA_RE = grammar.HEX_COMMIT
ENV_NAME_RE = grammar.ENV_NAME
# a library file name or an fnmatch pattern of one ('libcuda.so*'), as linkcheck matches them
LIBRARY_RE = re.compile(r"^[A-Za-z0-9_*?\[][A-Za-z0-9._+*?\[\]-]*\Z")
# the smoke checks verify knows and runs by default
SMOKE_CHECKS = ("imports", "matmul", "sdpa", "compile", "cpp_extension", "distributed")

Channel = Literal["release", "nightly"]
MAX_DISK_GB = 1_000_000.0  # a million GiB: any real disk
MAX_TIMEOUT_S = 7 * 24 * 3600.0  # a week: longer than any suite runs


class Strict(BaseModel):
    """Every table of a stack file: unknown fields refused, and strict types everywhere: ``timeout =
    true``, ``retries = "3"`` or ``nodes = 2.0`` is refused, never converted (pydantic's lax mode
    reads true as 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_control_characters(cls, value: object) -> object:
        """No string anywhere in a stack file (keys included) holds a newline or another control character."""
        _walk_strings(value)
        return value


def _walk_strings(value: object) -> None:
    if isinstance(value, str):
        grammar.no_controls(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk_strings(key)
            _walk_strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _walk_strings(item)


# the grammar a field's value keeps, declared with its type
Specifier = Annotated[str, AfterValidator(grammar.specifier)]
RelativePath = Annotated[str, AfterValidator(grammar.relative_path)]


def _each(check, values):
    for value in values or ():
        check(value)
    return values


def _every(check, *fields: str):
    """A validator holding each item of the list ``fields`` (or each key of the table) to
    ``check``; its error names the field, as written in the stack file."""
    return field_validator(*fields)(lambda values: _each(check, values))


def known_pythons(rules: Rules) -> list[str]:
    """Python versions ``rules`` know: torch's wheels and the OS archives."""
    found = {py for release in rules.torch.releases.values() for py in release.pythons}
    found |= {py for platform in rules.platforms.os.values() for py in platform.pythons}
    return sorted(found, key=lambda v: tuple(int(p) for p in v.split(".")))


def rules_of(info: ValidationInfo) -> Rules:
    """The rules a stack is validated against: handed in as the validation's context by the loader
    (the shipped data with the stack's own rules over it); the shipped rules where none are."""
    context = info.context if isinstance(info.context, dict) else {}
    rules = context.get("rules")
    return rules if isinstance(rules, Rules) else shipped_rules()


def _python(value: str, rules: Rules) -> str:
    grammar.matching(value, PYTHON_RE, "a Python version (try '3.12')")
    known = known_pythons(rules)
    if value not in known:
        raise ValueError(f"Python {value} is not in the rules data (known: {', '.join(known)})")
    return value


def _cuda(value: str) -> str:
    return grammar.matching(value, CUDA_RE, "a CUDA version (try '12.8' or 'cpu')")


def _os(value: str) -> str:
    return grammar.matching(value, OS_RE, "an OS name (try 'ubuntu24.04' or 'debian12')")


# the fields of [stack] tag that are not a component's version
TAG_AXES = ("name", "release", "slug", "cuda", "os", "python", "channel", "arch")


class StackInfo(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=100)]
    release: Annotated[str, Field(min_length=1)]
    image: str
    registry: str = ""
    description: str = ""

    # the image tag of each flavour, from its fields (TAG_AXES, or a component's locked version);
    # default '{release}-{slug}'
    tag: str | None = None

    _release = field_validator("release")(lambda v: grammar.oci_tag(v))
    _image = field_validator("image")(lambda v: grammar.oci_repository(v))

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str | None) -> str | None:
        if v is not None:
            grammar.tag_template_fields(v)
        return v

    _registry = field_validator("registry")(lambda v: grammar.oci_registry(v))

    @property
    def image_ref(self) -> str:
        return f"{self.registry.rstrip('/')}/{self.image}" if self.registry else self.image


PYTORCH_INDEXES = "https://download.pytorch.org/whl"  # PyTorch's variant indexes: /cpu, /cu128, /nightly/cu128


class Indexes(Strict):
    url: Annotated[str, AfterValidator(grammar.index_url)] | None = None
    extra: list[str] = []
    find_links: list[str] = []
    # PyTorch's variant indexes (https://download.pytorch.org/whl/<variant>): a mirror of them
    # (its URL in their place: <pytorch>/cpu, <pytorch>/nightly/cu128), or false: none, the
    # stack's own index and find_links serve torch's variants
    pytorch: Annotated[str, AfterValidator(grammar.index_url)] | Literal[False] | None = None

    def variant_index(self, url: str | None) -> str | None:
        """The variant index ``url`` (one of PyTorch's) as this stack reaches it."""
        if url is None or self.pytorch is None or not url.startswith(PYTORCH_INDEXES + "/"):
            return url
        return None if self.pytorch is False else self.pytorch.rstrip("/") + url[len(PYTORCH_INDEXES) :]

    _urls = _every(grammar.index_url, "extra", "find_links")


class JobBudget(Strict):
    divisor: Annotated[int, Field(ge=1)]
    cap: Annotated[int, Field(ge=1)]
    # the memory one compile unit takes ('6GiB'): MAX_JOBS no more than free memory holds
    memory: str | None = None

    @field_validator("memory")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[0-9]+(\.[0-9]+)?(GiB|MiB|GB|MB)", v):
            raise ValueError(f"'{v}' is not a size; accepted: a number with its unit, such as '6GiB', '7.5GB' or '800MiB'")
        return v


class FlavourFilter(Strict):
    """Restricts a component to some flavours: each given field must match."""

    cuda: Specifier | None = None
    os: list[str] | None = None
    python: Specifier | None = None
    channel: Channel | None = None

    _os_names = _every(_os, "os")


class Component(Strict):
    name: Annotated[str, AfterValidator(grammar.pep508_name)] = ""
    version: Specifier | None = None
    git: Annotated[str, AfterValidator(grammar.git_url)] | None = None
    commit: Annotated[str, AfterValidator(grammar.commit)] | None = None
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

    _extras = _every(grammar.pep508_extra, "extras")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        return None if v is None else grammar.relative_path(v.removeprefix("file://"))

    _requires = _every(grammar.requirement, "requires")

    _env = _every(grammar.env_name, "build_env")

    @field_validator("build_env")
    @classmethod
    def _no_credential(cls, v: dict[str, str]) -> dict[str, str]:
        for name, setting in v.items():
            no_credential(name, setting, "a build's environment, its logs and the lock")
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
        """The PEP 508 line uv resolves for this component (each part checked again, so that a
        component built without validation cannot turn into another line or an option)."""
        _checked_again(self)
        extras = f"[{','.join(sorted(self.extras))}]" if self.extras else ""
        if self.git is not None:
            return f"{self.name}{extras} @ git+{self.git}@{self.commit}"
        if self.path is not None:
            return f"{self.name}{extras} @ file://{self.path}"
        return f"{self.name}{extras}{self.version or ''}"


def _checked_again(component: Component) -> None:
    try:
        grammar.pep508_name(component.name)
        _each(grammar.pep508_extra, component.extras)
        if component.version is not None:
            grammar.specifier(component.version)
        if component.git is not None:
            grammar.git_url(component.git)
            grammar.commit(str(component.commit))
        if component.path is not None:
            grammar.relative_path(component.path.removeprefix("file://"))
    except ValueError as exc:
        raise SpecError(f"components.{grammar.shown(component.name)}: {exc}") from None


Arch = Literal["x86_64", "aarch64"]


class ExcludeCell(Strict):
    cuda: str | None = None
    os: str | None = None
    python: str | None = None
    channel: Channel | None = None
    arch: Arch | None = None


class IncludeCell(Strict):
    cuda: str
    os: str
    python: str
    channel: Channel = "release"
    arch: Arch = "x86_64"

    _cuda = field_validator("cuda")(lambda v: _cuda(v))
    _os = field_validator("os")(lambda v: _os(v))
    _python = field_validator("python")(lambda v, info: _python(v, rules_of(info)))


class Matrix(Strict):
    cuda: list[str]
    os: list[str]
    python: list[str]
    channel: list[Channel] = ["release"]
    arch: list[Arch] = ["x86_64"]
    exclude: list[ExcludeCell] = []
    include: list[IncludeCell] = []

    @model_validator(mode="after")
    def _cells_name_axis_values(self) -> Matrix:
        for number, cell in enumerate(self.exclude):
            for axis, value in cell.model_dump(exclude_none=True).items():
                allowed = getattr(self, axis)
                if value not in allowed:
                    raise ValueError(f"exclude[{number}]: {axis} '{value}' is not on the matrix (one of: {', '.join(allowed)})")
        return self

    _cudas = _every(_cuda, "cuda")

    @field_validator("python")
    @classmethod
    def _python(cls, v: list[str], info: ValidationInfo) -> list[str]:
        rules = rules_of(info)
        return _each(lambda value: _python(value, rules), v)

    _os_names = _every(_os, "os")


class CompilerCache(Strict):
    kind: Literal["ccache", "sccache", "none"] = "ccache"
    dir: RelativePath = ".cache/compiler"
    max_size: Annotated[str, Field(pattern=r"^\d+(\.\d+)?[KMGT]$")] = "10G"


class Build(Strict):
    base: dict[str, str] = {}
    # a base image whose tag does not say it is NVIDIA's CUDA devel image (a vendor's own, built on
    # one): the CUDA release its toolkit is of, per OS, its nvcc at the rules' devel cuda_home
    base_cuda: dict[str, Annotated[str, Field(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$")]] = {}
    # what build and check take when no --backend is given: a stack shipped as images says "oci"
    backend: Literal["venv", "oci"] = "venv"
    # which flavours a venv build given no --flavour takes: "all", or "installed-python", those
    # whose Python this machine has (the others named and left out: a stack made to try out here)
    venv_flavours: Literal["all", "installed-python"] = "all"
    system_packages: list[str] = []
    min_free_disk_gb: Annotated[float, Field(ge=0, le=MAX_DISK_GB, allow_inf_nan=False)] = 10.0
    compiler_cache: CompilerCache = CompilerCache()
    retries: Annotated[int, Field(ge=1, le=20)] = 4
    ca_bundle: str | None = None
    # variables that load or run code (trust.runs_code: LD_*, PYTHON*, BASH_ENV, ...) a component's
    # build_env may set; every other one is refused, since it would run code in the build's tools
    allow_env: list[str] = []

    @field_validator("allow_env")
    @classmethod
    def _allowed(cls, v: list[str]) -> list[str]:
        return allowed_names(v, "build_env")

    @field_validator("base_cuda")
    @classmethod
    def _declared_bases(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        bases = info.data.get("base") or {}
        undeclared = sorted(set(v) - set(bases))
        if undeclared:
            raise ValueError(
                f"'{grammar.shown(undeclared[0])}' has no base image in build.base "
                f"(accepted: the OS of a base it describes: {', '.join(sorted(bases)) or 'none given'})"
            )
        return v

    @field_validator("base")
    @classmethod
    def _bases(cls, v: dict[str, str]) -> dict[str, str]:
        for key, ref in v.items():
            parse_base_key(key)  # an OS, or axis=value pairs (stackfile.bases)
            grammar.base_image(ref)
        return v

    _packages = _every(grammar.debian_package, "system_packages")

    @field_validator("ca_bundle")
    @classmethod
    def _ca(cls, v: str | None) -> str | None:
        if v is None:
            return None
        grammar.relative_path(v)
        if "," in v or "=" in v:
            raise ValueError(
                f"'{grammar.shown(v)}' holds ',' or '=', which image builds cannot pass as a secret's file "
                "(--secret id=ca,src=PATH); give a path without them"
            )
        return v


class Toolchain(Strict):
    packages: list[str] = ["ninja", "cmake"]
    nvcc: bool = True
    # GPU targets of ahead-of-time extension builds: '90', '90a', '100' (sm_XX); [] leaves each package's default
    archs: list[Annotated[str, Field(pattern=r"^\d{2,3}[af]?$")]] = []

    _packages = _every(grammar.requirement, "packages")


MAX_EXCLUSIONS = 1000  # per suite: more than any known-failures list holds


class Exclusion(Strict):
    """A test the suite does not run (a known failure kept out of the gate), and why."""

    test: str  # a pytest id or an fnmatch pattern of ids, matched against each collected test's id
    reason: str

    _test = field_validator("test")(lambda v: grammar.test_pattern(v))
    _reason = field_validator("reason")(lambda v: grammar.one_line_text(v))


class Suite(Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    command: Annotated[str, Field(min_length=1)]
    max_failed: Annotated[int, Field(ge=0)] = 0
    timeout: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)] = 1800.0
    rerun_failed: bool = True
    allow_no_tests: bool = False  # a run that executed no test passes only when this says so
    exclude: Annotated[list[Exclusion], Field(max_length=MAX_EXCLUSIONS)] = []

    @model_validator(mode="after")
    def _exclusions_need_pytest(self) -> Suite:
        if self.exclude and not is_pytest_command(self.command):
            raise ValueError("exclude needs a pytest command ('python -m pytest ...'): only pytest's collection can leave a test out")
        patterns = [item.test for item in self.exclude]
        twice = next((p for n, p in enumerate(patterns) if p in patterns[:n]), None)
        if twice is not None:
            raise ValueError(f"exclude: test '{grammar.shown(twice)}' is given twice (accepted: each pattern once, with one reason)")
        return self


# an object's path under site-packages as an fnmatch pattern: 'nvfuser/_C*.so'
OBJECT_PATTERN_RE = re.compile(r"^[A-Za-z0-9_*?\[][A-Za-z0-9._+*?\[\]/-]{0,300}\Z")


class LinkAcceptance(Strict):
    """A true link-check finding the release accepts, with its reason (shown in verify's report,
    verify.json and the release notes, as accepted test failures are)."""

    file: str  # the object's path under site-packages (fnmatch): 'nvfuser/_C*.so'
    library: str  # the library it cannot find (fnmatch): 'libc10.so'
    reason: Annotated[str, Field(min_length=1, max_length=500)]
    link: Annotated[str, AfterValidator(grammar.web_link)] | None = None

    @field_validator("file")
    @classmethod
    def _file(cls, v: str) -> str:
        if not OBJECT_PATTERN_RE.fullmatch(v) or ".." in v.split("/"):
            raise ValueError(f"'{grammar.shown(v)}' is not an object's path under site-packages (such as 'nvfuser/_C*.so')")
        return v

    @field_validator("library")
    @classmethod
    def _library(cls, v: str) -> str:
        if not LIBRARY_RE.fullmatch(v):
            raise ValueError(f"'{grammar.shown(v)}' is not a library file name or pattern (such as 'libc10.so')")
        return v


class Links(Strict):
    banned: list[str] = []
    required: list[str] = []
    allow_stubs_rpath: bool = False
    accept: list[LinkAcceptance] = []

    @field_validator("banned", "required")
    @classmethod
    def _libraries(cls, v: list[str]) -> list[str]:
        for name in v:
            parts = name.split(" needs ")  # required links may name their owner: 'OBJECT needs LIB'
            if len(parts) > 2 or not all(LIBRARY_RE.fullmatch(part) for part in parts):
                raise ValueError(
                    f"'{grammar.shown(name)}' is not a library file name or pattern (such as "
                    "'libcuda.so.1', 'libcudnn*.so.9' or 'libtorch_cuda.so needs libnccl.so.2')"
                )
        return v


class Verify(Strict):
    smoke: list[str] = list(SMOKE_CHECKS)
    suite: list[Suite] = []
    known_issues: RelativePath | None = None
    max_failed_tests: Annotated[int, Field(ge=0)] = 0
    # a folder of OSV advisories inside the stack's folder; verify lists those affecting the lock,
    # and fails above max_severity (the highest severity the gate accepts) when that is given
    advisories: RelativePath | None = None
    max_severity: Literal["low", "medium", "high", "critical"] | None = None
    links: Links = Links()

    @field_validator("smoke")
    @classmethod
    def _smoke(cls, v: list[str]) -> list[str]:
        for name in v:
            if name not in SMOKE_CHECKS:
                raise ValueError(f"'{grammar.shown(name)}' is not a smoke check (one of: {', '.join(SMOKE_CHECKS)})")
        return v


class Bench(Strict):
    """How ``trainstack bench --stack`` measures the stack's flavours (its flags win). Strict
    types: ``batch = true`` or ``steps = "20"`` is refused, never converted."""

    model_config = ConfigDict(strict=True)

    preset: str = "1b"
    batch: Annotated[int, Field(ge=1, le=65536)] = 4
    seq: Annotated[int, Field(ge=16)] = 4096
    steps: Annotated[int, Field(ge=2, le=100000)] = 20
    warmup: Annotated[int, Field(ge=1, le=100000)] = 5
    modes: list[str] = ["eager", "compile"]

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str) -> str:
        if v not in SHAPES:
            raise ValueError(f"'{grammar.shown(v)}' is not a bench preset (one of: {', '.join(SHAPES)})")
        return v

    @field_validator("modes")
    @classmethod
    def _modes(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("no mode given (accepted: one or more modes such as 'compile+bf16')")
        for mode in v:
            try:
                parse_mode(mode)
            except UsageError as exc:
                raise ValueError(exc.message.removeprefix("--modes: ")) from None
        return v

    @model_validator(mode="after")
    def _seq_fits_the_preset(self) -> Bench:
        longest = SHAPES[self.preset]["max_seq"]
        if self.seq > longest:
            raise ValueError(f"seq {self.seq} is longer than preset {self.preset}'s max_seq ({longest})")
        return self


class Cluster(Strict):
    """How ``trainstack render --cluster`` places the stack's fleet checks and bench on a cluster."""

    nodes: Annotated[int, Field(ge=1, le=4096)] = 2
    # GPUs a node (a pod) holds; 0: CPU nodes, the all-reduce over gloo and bench on the CPU
    gpus_per_node: Annotated[int, Field(ge=0, le=64)] = 8
    partition: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")] | None = None
    namespace: Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")] = "default"
    port: Annotated[int, Field(ge=1024, le=65535)] = 29500
    # all-reduce message sizes in bytes, as nccl-tests sweeps them
    allreduce_sizes: Annotated[list[Annotated[int, Field(ge=4, le=1 << 36)]], Field(min_length=1, max_length=32)] = [
        1 << 20,
        16 << 20,
        256 << 20,
        1 << 30,
    ]
    # the Kubeflow PyTorchJob elastic between min_nodes and nodes (none: a fixed size, one Master and
    # nodes - 1 Workers), restarting its workers at most max_restarts times
    min_nodes: Annotated[int, Field(ge=1, le=4096)] | None = None
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3

    @model_validator(mode="after")
    def _elastic_range(self) -> Cluster:
        if self.min_nodes is not None and self.min_nodes > self.nodes:
            raise ValueError(f"min_nodes {self.min_nodes} is more than nodes {self.nodes} (accepted: 1 to nodes)")
        return self


MAX_IMAGE_ENV = 200  # variables baked into an image: more than any image sets
ENV_ALLOW = "allow"  # [env] allow = [...]: the variables that run code the stack may set


def allowed_names(names: list[str], where: str) -> list[str]:
    """An allow list ([build] allow_env, [env] allow): each a variable trust.runs_code knows, since
    naming any other allows nothing (a typo)."""
    for name in names:
        grammar.env_name(name)
        if runs_code(name) is None:
            raise ValueError(
                f"'{grammar.shown(name)}' is not a variable {where} refuses; the allow list names only variables "
                "that load or run code (LD_*, PYTHON*, PROMPT_COMMAND, OPENSSL_CONF, NCCL_NET_PLUGIN, ...: "
                "code_variables.toml)"
            )
    return names


def no_credential(name: str, setting: object, where: str) -> None:
    """ValueError when ``name`` says its value is a credential, or the value holds 'user:password@'."""
    what = credential_name(name)
    if what is not None:
        raise ValueError(f"{name}: a credential's name ({what}); {where} never holds one: pass it to the job's environment when it runs")
    if isinstance(setting, str) and holds_userinfo(setting):
        raise ValueError(f"{name}: a URL or host with 'user:password@' in it; {where} never holds credentials")


def image_env(value: dict[str, str]) -> dict[str, str]:
    """[env]: variables set in the image (ENV) and the venv's activation, checked by their grammar.
    A credential never belongs there: it would sit in an image layer or a file for anyone to read;
    nor a name the activation keeps its own state in."""
    if len(value) > MAX_IMAGE_ENV:
        raise ValueError(f"{len(value)} variables, more than the {MAX_IMAGE_ENV} accepted")
    for name, setting in value.items():
        grammar.env_name(name)
        reserved = reserved_name(name)
        if reserved is not None:
            raise ValueError(f"{name}: a name the venv's activation keeps to itself ({reserved})")
        no_credential(name, setting, "an image or a venv")
        if not isinstance(setting, str):
            raise ValueError(f'{name}: accepted: a string value, such as "eth0"')
        grammar.env_value(setting)
    return value


class Stack(Strict):
    stack: StackInfo
    index: Indexes = Indexes()
    components: dict[str, Component]
    matrix: Matrix
    build: Build = Build()
    # environment variables baked into the image (ENV) and the venv's activation: NCCL_*, CUDA_MODULE_LOADING
    env: dict[str, str] = {}
    # [env] allow: the variables of [env] that load or run code (trust.runs_code) it may set
    env_allow: list[str] = []
    toolchain: Toolchain = Toolchain()
    verify: Verify = Verify()
    bench: Bench = Bench()
    cluster: Cluster = Cluster()
    # rules added to or overriding the shipped rules data (same layout; validated by rules.stack)
    rules: dict[str, Any] = {}
    # the rules in effect: the shipped data with this stack's own over it (set by the loader)
    _rules_in_effect: Rules | None = PrivateAttr(default=None)

    @property
    def rules_in_effect(self) -> Rules:
        return self._rules_in_effect or shipped_rules()

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
                if item.get("version") == "*":  # any version, as in the short form
                    del item["version"]
            expanded[name] = item
        return expanded

    _env = field_validator("env")(lambda v: image_env(v))

    @model_validator(mode="before")
    @classmethod
    def _env_allow_list(cls, data: object) -> object:
        """[env] allow = [...] is the allow list, not a variable: it moves to ``env_allow``."""
        if not isinstance(data, dict):
            return data
        if "env_allow" in data:
            raise ValueError("env_allow: unknown field (the variables [env] may set that run code go in [env] allow)")
        env = data.get("env")
        if isinstance(env, dict) and ENV_ALLOW in env:  # a list, or refused as one (never a variable 'allow')
            rest = {k: v for k, v in env.items() if k != ENV_ALLOW}
            return {**data, "env": rest, "env_allow": env[ENV_ALLOW]}
        return data

    @field_validator("env_allow")
    @classmethod
    def _env_allowed(cls, v: list[str]) -> list[str]:
        return allowed_names(v, "[env]")

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

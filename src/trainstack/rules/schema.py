"""Pydantic models of the rules data files. Pure data; no I/O."""

from __future__ import annotations

from string import Formatter
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator

from trainstack import grammar
from trainstack.grammar import web_link


def template(value: str, names: tuple[str, ...] | None = None) -> str:
    """A rule's text with '{name}' placeholders only (no attribute, index, conversion or format
    spec; '{{' for a brace), each one of ``names`` when given. ValueError saying so otherwise."""
    try:
        parsed = list(Formatter().parse(value))
    except ValueError:
        raise ValueError(f"{value[:80]!r} has a '{{' or '}}' without its pair (write '{{{{' for a brace)") from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise ValueError(f"{value[:80]!r}: '{{{field[:40]}}}' is not a placeholder ('{{name}}' only)")
        if names is not None and field not in names:
            raise ValueError(f"{value[:80]!r}: '{{{field}}}' is not filled here (accepted: {', '.join(names)})")
    return value


def fill(text: str, **values: object) -> str:
    """``text`` with its '{name}' placeholders filled from ``values``; a placeholder this rule does
    not fill stays as written, and text that is not a template is returned as it is. Never raises."""
    try:
        parsed = list(Formatter().parse(text))
    except ValueError:
        return text
    out = []
    for literal, field, spec, conversion in parsed:
        out.append(literal)
        if field is None:
            continue
        if field in values and not spec and not conversion:
            out.append(str(values[field]))
        else:
            out.append("{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}")
    return "".join(out)


# where a rule comes from: an http(s) page, published as a link in release notes
Source = Annotated[str, AfterValidator(web_link)]


class Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cited(Data):
    """A rule's text for the user and the public page that backs it."""

    message: str
    source: Source

    _message = field_validator("message")(lambda v: template(v))


class TorchIndex(Cited):
    release: str  # URL pattern with {variant}
    nightly: str

    _urls = field_validator("release", "nightly")(lambda v: template(v, ("variant",)))


class TorchRelease(Data):
    variants: list[str]
    pypi_default: str
    pythons: list[str]
    source: Source


class TorchArch(Cited):
    """Which torch wheels a machine architecture gets: the variant PyPI serves for it (None:
    the release's own pypi_default) and the first torch minor with CUDA wheels for it."""

    pypi_default: str | None = None
    cuda_from: str | None = None


class TorchRules(Data):
    index: TorchIndex
    variants: Cited  # message with {minor} and {variants}
    pythons: Cited  # message with {minor} and {pythons}
    nightly: Cited
    releases: dict[str, TorchRelease]  # "2.11" -> release
    arch: dict[str, TorchArch] = {}  # "aarch64" -> what differs from x86_64


class CudaVersion(Data):
    driver: str
    archs: list[str]
    source: Source | None = None  # the release's own notes


class Nvcc(Cited):
    packages: dict[str, str]  # CUDA major -> wheel name
    compiles: list[str] | None = None  # CUDA majors whose wheels hold nvcc itself (None: every one of packages)
    refusal: str = "the nvcc wheels cannot build extensions for CUDA {cuda} ({why})"

    _refusal = field_validator("refusal")(lambda v: template(v, ("cuda", "why")))


def _matching(pattern, what: str):
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value[:80]!r} is not {what}")
        return value

    return AfterValidator(check)


CUDA_RELEASE = Annotated[str, _matching(grammar.CUDA_RELEASE, "a CUDA release such as 12.4")]


class DebianToolkitRelease(Data):
    """The toolkit one Debian release packages: its suite, the CUDA release and the exact version."""

    suite: Annotated[str, _matching(grammar.DEBOOTSTRAP_SUITE, "a Debian suite such as trixie")]
    cuda: CUDA_RELEASE
    version: Annotated[str, _matching(grammar.DEBIAN_VERSION, "a Debian version such as 12.4.131~12.4.1-2")]
    source: Source


class DebianToolkit(Cited):
    """nvcc from Debian's archive: the package, the archive component that holds it, and per OS
    of the matrix (debian12, debian13) the release of it that OS ships."""

    package: Annotated[str, _matching(grammar.DEBIAN_NAME, "a Debian package name")]
    component: Annotated[str, _matching(grammar.DEBIAN_COMPONENT, "a Debian archive component such as non-free")]
    os: dict[str, DebianToolkitRelease]

    _message = field_validator("message")(lambda v: template(v, ("os", "suite", "cuda", "package", "version", "component")))


class DevelImage(Cited):
    """NVIDIA's CUDA devel images: the repositories that publish them and where their toolkit lives."""

    repositories: list[Annotated[str, _matching(grammar.OCI_REGISTRY, "an image repository such as docker.io/nvidia/cuda")]]
    cuda_home: Annotated[str, _matching(grammar.ABSOLUTE_DIR, "an absolute folder such as /usr/local/cuda")]

    _message = field_validator("message")(lambda v: template(v, ("image", "cuda", "home")))


class CudaRules(Data):
    driver: Cited
    archs: Cited
    nvcc: Nvcc
    versions: dict[str, CudaVersion]
    debian: DebianToolkit | None = None  # nvcc from the Debian archive of a Debian base
    devel_image: DevelImage | None = None  # nvcc of a CUDA devel base image


class OsPlatform(Data):
    glibc: str
    platform: str
    source: Source
    pythons: list[str] = []  # pythonX.Y packages of the OS's own archive
    pythons_source: Source | None = None


class PlatformRules(Data):
    glibc: Cited
    os: dict[str, OsPlatform]
    arch: Cited | None = None  # how the matrix's arch reaches uv's --python-platform


class FlashAttn(Cited):
    package: str
    min_arch: str
    arch_env: list[str]


class DeepSpeedOp(Cited):
    env: str
    system_packages: list[str] = []
    torch: str | None = None  # specifier the op needs torch to satisfy


class DeepSpeed(Data):
    package: str
    all_env: str
    ops: dict[str, DeepSpeedOp]


class CompileNeeds(Cited):
    """A package torch.compile needs on some Pythons that torch's wheels do not require there."""

    python: str  # specifier of the Pythons concerned
    package: str

    _message = field_validator("message")(lambda v: template(v, ("python",)))


class ExtensionRules(Data):
    flash_attn: FlashAttn
    deepspeed: DeepSpeed
    compile: CompileNeeds | None = None


class Rules(Data):
    torch: TorchRules
    cuda: CudaRules
    platforms: PlatformRules
    extensions: ExtensionRules

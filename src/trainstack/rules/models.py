"""Pydantic models of the rules data files. Pure data; no I/O."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


def _web_link(value: str) -> str:
    from trainstack.stackfile.grammar import web_link  # a leaf module; imported late, as stackfile imports rules

    return web_link(value)


# where a rule comes from: an http(s) page, published as a link in release notes
Source = Annotated[str, AfterValidator(_web_link)]


class Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cited(Data):
    """A rule's text for the user and the public page that backs it."""

    message: str
    source: Source


class TorchIndex(Cited):
    release: str  # URL pattern with {variant}
    nightly: str


class TorchRelease(Data):
    variants: list[str]
    pypi_default: str
    pythons: list[str]
    source: Source


class TorchRules(Data):
    index: TorchIndex
    variants: Cited  # message with {minor} and {variants}
    pythons: Cited  # message with {minor} and {pythons}
    nightly: Cited
    releases: dict[str, TorchRelease]  # "2.11" -> release


class CudaVersion(Data):
    driver: str
    archs: list[str]


class Nvcc(Cited):
    packages: dict[str, str]  # CUDA major -> wheel name


class CudaRules(Data):
    driver: Cited
    archs: Cited
    nvcc: Nvcc
    versions: dict[str, CudaVersion]


class OsPlatform(Data):
    glibc: str
    platform: str
    source: Source
    pythons: list[str] = []  # pythonX.Y packages of the OS's own archive
    pythons_source: Source | None = None


class PlatformRules(Data):
    glibc: Cited
    os: dict[str, OsPlatform]


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


class ExtensionRules(Data):
    flash_attn: FlashAttn
    deepspeed: DeepSpeed


class Rules(Data):
    torch: TorchRules
    cuda: CudaRules
    platforms: PlatformRules
    extensions: ExtensionRules

"""The environment report's fixed schema: every field always present, "not found" when unknown."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

NOT_FOUND = "not found"
SCHEMA_VERSION = 1


class Fixed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OsInfo(Fixed):
    name: str = NOT_FOUND
    kernel: str = NOT_FOUND
    machine: str = NOT_FOUND


class LibcInfo(Fixed):
    name: str = NOT_FOUND
    version: str = NOT_FOUND


class Compiler(Fixed):
    path: str = NOT_FOUND
    version: str = NOT_FOUND
    # whose it is: "environment" (inside the target: its bin or its toolchain wheels),
    # "CUDA_HOME" (the CUDA home the environment names), or "host" (found on the host's PATH)
    owner: str = NOT_FOUND


class PythonInfo(Fixed):
    version: str = NOT_FOUND
    implementation: str = NOT_FOUND
    executable: str = NOT_FOUND
    prefix: str = NOT_FOUND
    is_venv: bool | str = NOT_FOUND


class TorchInfo(Fixed):
    version: str = NOT_FOUND
    path: str = NOT_FOUND
    cuda: str = NOT_FOUND
    rocm: str = NOT_FOUND
    arch_list: list[str] | str = NOT_FOUND
    cuda_available: bool | str = NOT_FOUND
    devices: list[str] | str = NOT_FOUND  # "NAME (sm_XY)" as torch sees them


class LibraryInfo(Fixed):
    """cuDNN or NCCL: the version torch was built against and what the process really maps."""

    compiled: str = NOT_FOUND
    runtime: str = NOT_FOUND
    loaded: list[str] | str = NOT_FOUND  # paths from /proc/self/maps after initialising


class Gpu(Fixed):
    index: int
    name: str = NOT_FOUND
    uuid: str = NOT_FOUND
    capability: str = NOT_FOUND
    memory_mib: int | str = NOT_FOUND


class GpuInfo(Fixed):
    driver: str = NOT_FOUND
    cuda_driver: str = NOT_FOUND
    gpus: list[Gpu] = []
    reason: str = ""  # why NVML gave nothing, when it did


class VersionChange(Fixed):
    name: str
    locked: str
    installed: str


class Drift(Fixed):
    lock: str = NOT_FOUND  # the lock manifest and flavour compared against
    missing: list[str] = []
    different: list[VersionChange] = []
    extra: list[str] = []


class BuildFact(Fixed):
    name: str
    built: str = NOT_FOUND
    runtime: str = NOT_FOUND
    match: bool | str = NOT_FOUND


class BuildFacts(Fixed):
    record: str = NOT_FOUND  # the build.json read
    facts: list[BuildFact] = []


class EnvReport(Fixed):
    schema_version: int = SCHEMA_VERSION
    target: str
    os: OsInfo = OsInfo()
    libc: LibcInfo = LibcInfo()
    compilers: dict[str, Compiler] = {}  # "cc", "c++", "nvcc": always these three keys
    python: PythonInfo = PythonInfo()
    torch: TorchInfo = TorchInfo()
    cudnn: LibraryInfo = LibraryInfo()
    nccl: LibraryInfo = LibraryInfo()
    cuda_libraries: list[str] | str = NOT_FOUND  # libcudart/libcublas paths mapped after import
    gpus: GpuInfo = GpuInfo()
    allocator_env: dict[str, str] = {}  # every known variable: its value or "not set"
    packages: dict[str, str] = {}  # canonical name -> installed version
    drift: Drift = Drift()
    build: BuildFacts = BuildFacts()
    errors: dict[str, str] = {}  # section -> what went wrong while probing it

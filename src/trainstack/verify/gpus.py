"""GPUs and driver through NVML (nvidia-ml-py). On a machine without a driver: a reason."""

from __future__ import annotations

from typing import Any

from trainstack.verify.report_schema import NOT_FOUND, Gpu, GpuInfo


def read_gpus(nvml: Any | None = None) -> GpuInfo:
    """Query NVML; ``nvml`` is the pynvml module (a stand-in in tests on machines without NVML)."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return GpuInfo(reason="nvidia-ml-py is not installed")
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError subclasses are generated at run time
        return GpuInfo(reason=f"NVML: {exc}")
    try:
        return GpuInfo(
            driver=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_driver=_cuda_version(nvml.nvmlSystemGetCudaDriverVersion_v2()),
            gpus=[_gpu(nvml, index) for index in range(nvml.nvmlDeviceGetCount())],
        )
    finally:
        nvml.nvmlShutdown()


def _gpu(nvml: Any, index: int) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    return Gpu(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        capability=f"{major}.{minor}",
        memory_mib=int(memory.total // 2**20),
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value) or NOT_FOUND


def _cuda_version(value: int) -> str:
    """NVML's 12080 -> '12.8'."""
    return f"{value // 1000}.{value % 1000 // 10}"

"""Pure parts of the report: drift, NVML reading (recorded values), version matching."""

from __future__ import annotations

from types import SimpleNamespace

from trainstack.verify.drift import compute_drift, same_version
from trainstack.verify.gpus import read_gpus


def test_drift_missing_different_extra() -> None:
    drift = compute_drift(
        {"Torch": "2.11.0+cu128", "numpy": "2.3.0", "flash_attn": "2.8.3"},
        {"torch": "2.11.0+cu128", "numpy": "2.3.1", "pip": "24", "einops": "0.8"},
        "lock",
    )
    assert drift.missing == ["flash-attn"]
    assert [(d.name, d.locked, d.installed) for d in drift.different] == [("numpy", "2.3.0", "2.3.1")]
    assert drift.extra == ["einops"]


def test_local_label_on_one_side_only_is_the_same_version() -> None:
    assert same_version("2.11.0", "2.11.0+cu128")
    assert not same_version("2.11.0+cu126", "2.11.0+cu128")
    assert not same_version("2.11.0", "2.11.1")


class NvmlError(Exception):
    pass


class RecordedNvml:
    """Values as nvidia-ml-py returned them on an H100 host (driver 570.133.20)."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.shut = False

    def nvmlInit(self) -> None:
        if self.fail:
            raise NvmlError(self.fail)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.133.20"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=85520809984, free=0, used=0)

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-0000000{handle}"


def test_nvml_recorded_values() -> None:
    nvml = RecordedNvml()
    info = read_gpus(nvml)
    assert (info.driver, info.cuda_driver, info.reason) == ("570.133.20", "12.8", "")
    assert [(g.index, g.capability, g.memory_mib) for g in info.gpus] == [(0, "9.0", 81559), (1, "9.0", 81559)]
    assert nvml.shut


def test_nvml_without_driver_gives_not_found_with_reason() -> None:
    info = read_gpus(RecordedNvml(fail="NVML Shared Library Not Found"))
    assert info.driver == "not found" and info.gpus == []
    assert info.reason == "NVML: NVML Shared Library Not Found"


def test_nvml_on_this_machine_never_raises() -> None:
    info = read_gpus()
    assert info.gpus or info.reason

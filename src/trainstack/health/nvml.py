"""NVML behind a small interface: raw answers recorded as plain JSON, then parsed.

``PynvmlSource`` asks the driver through nvidia-ml-py; ``RecordedSource`` replays a
recording, so the parsing and the checks are tested on real answers of real GPUs.
Every NVML call that fails is recorded as ``{"error": "<NVMLError class>: <text>"}``
instead of a value: a GPU that does not support a query says so, and the check
decides what that means.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

NVLINK_MAX_LINKS = 18


class NvmlUnavailable(Exception):
    """NVML cannot be used on this node; the message says why."""


class NvmlSource(Protocol):
    def record(self) -> dict[str, Any]:
        """Raw answers for the node and each GPU (see ``PynvmlSource.record``)."""

    def sample(self, index: int) -> dict[str, Any]:
        """A quick reading of one GPU's clocks, clock-event reasons and temperature."""


class RecordedSource:
    """Replays a recording made by ``PynvmlSource.record`` (sampling returns the recorded GPU)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    @classmethod
    def from_file(cls, path: Path) -> RecordedSource:
        return cls(json.loads(path.read_text(encoding="utf-8")))

    def record(self) -> dict[str, Any]:
        return self.raw

    def sample(self, index: int) -> dict[str, Any]:
        gpu = self.raw["gpus"][index]
        return {k: gpu[k] for k in ("clock_sm_mhz", "clocks_event_reasons", "temperature_c")}


class PynvmlSource:
    """The real driver, through nvidia-ml-py. Construction fails with NvmlUnavailable."""

    def __init__(self) -> None:
        import pynvml

        self.nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML unavailable ({type(exc).__name__}: {exc})") from None

    def close(self) -> None:
        self.nv.nvmlShutdown()

    def _ask(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return _plain(fn(*args))
        except self.nv.NVMLError as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}

    def record(self) -> dict[str, Any]:
        nv = self.nv
        count = nv.nvmlDeviceGetCount()
        return {
            "driver_version": self._ask(nv.nvmlSystemGetDriverVersion),
            "cuda_driver_version": self._ask(nv.nvmlSystemGetCudaDriverVersion),
            "nvml_version": self._ask(nv.nvmlSystemGetNVMLVersion),
            "gpus": [self._gpu(i) for i in range(count)],
        }

    def _gpu(self, index: int) -> dict[str, Any]:
        nv, ask = self.nv, self._ask
        h = nv.nvmlDeviceGetHandleByIndex(index)
        unc, corr = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
        vol, agg = nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC
        return {
            "index": index,
            "name": ask(nv.nvmlDeviceGetName, h),
            "uuid": ask(nv.nvmlDeviceGetUUID, h),
            "pci_bus_id": ask(lambda: nv.nvmlDeviceGetPciInfo(h).busId),
            "memory_total_bytes": ask(lambda: nv.nvmlDeviceGetMemoryInfo(h).total),
            "persistence_mode": ask(nv.nvmlDeviceGetPersistenceMode, h),
            "ecc_mode": ask(nv.nvmlDeviceGetEccMode, h),
            "ecc_volatile_uncorrected": ask(nv.nvmlDeviceGetTotalEccErrors, h, unc, vol),
            "ecc_aggregate_uncorrected": ask(nv.nvmlDeviceGetTotalEccErrors, h, unc, agg),
            "ecc_volatile_corrected": ask(nv.nvmlDeviceGetTotalEccErrors, h, corr, vol),
            "ecc_aggregate_corrected": ask(nv.nvmlDeviceGetTotalEccErrors, h, corr, agg),
            "remapped_rows": ask(nv.nvmlDeviceGetRemappedRows, h),
            "retired_pages_sbe": ask(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
            "retired_pages_dbe": ask(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
            "retired_pages_pending": ask(nv.nvmlDeviceGetRetiredPagesPendingStatus, h),
            "max_clock_sm_mhz": ask(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
            "max_clock_mem_mhz": ask(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
            "clock_mem_mhz": ask(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            "power_mw": ask(nv.nvmlDeviceGetPowerUsage, h),
            "power_limit_mw": ask(nv.nvmlDeviceGetEnforcedPowerLimit, h),
            "nvlink_state": [ask(nv.nvmlDeviceGetNvLinkState, h, link) for link in range(NVLINK_MAX_LINKS)],
            **self.sample(index),
        }

    def sample(self, index: int) -> dict[str, Any]:
        nv, ask = self.nv, self._ask
        h = nv.nvmlDeviceGetHandleByIndex(index)
        # The clock "throttle" reasons were renamed "clocks event" reasons in newer NVML.
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        return {
            "clock_sm_mhz": ask(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            "clocks_event_reasons": ask(reasons, h),
            "temperature_c": ask(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
        }


def _plain(value: Any) -> Any:
    """NVML answers as JSON-ready values (bytes to str, tuples and structs to lists)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "_fields_"):
        return {name: _plain(getattr(value, name)) for name, _ in value._fields_}
    return value


# Clock event reasons (nvml.h, nvmlClocksEventReason*), and how each bears on health.
CLOCK_REASONS: dict[int, tuple[str, str]] = {
    0x1: ("gpu_idle", "ok"),
    0x2: ("applications_clocks_setting", "warn"),
    0x4: ("sw_power_cap", "ok"),
    0x8: ("hw_slowdown", "critical"),
    0x10: ("sync_boost", "ok"),
    0x20: ("sw_thermal_slowdown", "warn"),
    0x40: ("hw_thermal_slowdown", "critical"),
    0x80: ("hw_power_brake_slowdown", "critical"),
    0x100: ("display_clock_setting", "ok"),
}


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, (name, _) in CLOCK_REASONS.items() if mask & bit]


class GpuSnapshot(BaseModel):
    """One GPU's NVML answers, typed; ``unavailable`` maps a field to the NVML error it got."""

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    persistence_mode: int | None = None
    ecc_current: int | None = None
    ecc_pending: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_volatile_corrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages: int | None = None
    retired_pages_pending: bool | None = None
    clock_sm_mhz: int | None = None
    max_clock_sm_mhz: int | None = None
    clock_mem_mhz: int | None = None
    max_clock_mem_mhz: int | None = None
    clocks_event_reasons: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    nvlink_up: int | None = None
    nvlink_down: int | None = None
    unavailable: dict[str, str] = Field(default_factory=dict)


class NodeSnapshot(BaseModel):
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    gpus: list[GpuSnapshot] = Field(default_factory=list)
    unavailable: dict[str, str] = Field(default_factory=dict)


def _err(value: Any) -> str | None:
    return value["error"] if isinstance(value, dict) and "error" in value else None


def parse_node(raw: dict[str, Any]) -> NodeSnapshot:
    node = NodeSnapshot(gpus=[parse_gpu(g) for g in raw.get("gpus", [])])
    for key in ("driver_version", "cuda_driver_version"):
        value = raw.get(key)
        if (reason := _err(value)) is not None:
            node.unavailable[key] = reason
        else:
            setattr(node, key, value)
    return node


def parse_gpu(raw: dict[str, Any]) -> GpuSnapshot:
    gpu = GpuSnapshot(index=raw["index"])
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "index":
            continue
        if (reason := _err(value)) is not None:
            gpu.unavailable[key] = reason
            continue
        for field, parsed in _PARSERS.get(key, lambda k, v: {k: v})(key, value).items():
            # Single- and double-bit retired pages add up to one count.
            fields[field] = fields.get(field, 0) + parsed if field == "retired_pages" else parsed
    return gpu.model_copy(update=fields)


def _ecc_mode(_: str, v: list[int]) -> dict[str, Any]:
    return {"ecc_current": v[0], "ecc_pending": v[1]}


def _remapped(_: str, v: list[int]) -> dict[str, Any]:
    corr, unc, pending, failure = v
    return {
        "remapped_correctable": corr,
        "remapped_uncorrectable": unc,
        "remap_pending": bool(pending),
        "remap_failure": bool(failure),
    }


def _pages(_: str, v: list[int]) -> dict[str, Any]:
    return {"retired_pages": len(v)}


def _nvlink(_: str, states: list[Any]) -> dict[str, Any]:
    # Links past the GPU's count answer with an error; only answered links count.
    answered = [s for s in states if _err(s) is None]
    up = sum(1 for s in answered if s == 1)
    return {"nvlink_up": up, "nvlink_down": len(answered) - up}


_PARSERS: dict[str, Callable[[str, Any], dict[str, Any]]] = {
    "ecc_mode": _ecc_mode,
    "remapped_rows": _remapped,
    "retired_pages_sbe": _pages,
    "retired_pages_dbe": _pages,
    "retired_pages_pending": lambda k, v: {k: bool(v)},
    "power_mw": lambda k, v: {"power_w": v / 1000},
    "power_limit_mw": lambda k, v: {"power_limit_w": v / 1000},
    "nvlink_state": _nvlink,
}

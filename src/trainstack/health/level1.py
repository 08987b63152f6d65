"""Level 1 checks: pure verdicts on NVML snapshots and host facts, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from trainstack.health.host import Space
from trainstack.health.nvml import CLOCK_REASONS, GpuSnapshot, NodeSnapshot, decode_reasons
from trainstack.health.schema import Check, Status
from trainstack.health.thresholds import Limit, Thresholds


@dataclass(frozen=True)
class Expectations:
    gpus: int | None = None
    min_driver: str | None = None
    min_driver_source: str = ""
    runtime_cuda: str | None = None  # the CUDA version torch was built for, if torch is installed


def limit_check(
    name: str, value: float | None, limit: Limit, unit: str, *, gpu: int | None = None, level: int = 1, reason: str = "", message: str = ""
) -> Check:
    """The verdict of ``limit`` on ``value``; no value is unknown with ``reason``."""
    if value is None:
        return Check(
            name=name,
            level=level,
            status=Status.unknown,
            gpu=gpu,
            unit=unit,
            threshold=limit.describe() or None,
            message=reason or "not measured",
        )
    return Check(
        name=name,
        level=level,
        status=limit.evaluate(value),
        gpu=gpu,
        value=_significant(value),
        threshold=limit.describe() or None,
        unit=unit,
        message=message,
    )


def _significant(value: float) -> int | float:
    """Counts stay integers; measurements keep four significant digits."""
    return value if isinstance(value, int) else float(f"{value:.4g}")


def host_checks(shm: Space, disk: Space, t: Thresholds) -> list[Check]:
    return [
        limit_check("host.shm_size", shm.gib, t.shm_gib, "GiB", reason=shm.reason, message=shm.path),
        limit_check("host.disk_free", disk.gib, t.disk_free_gib, "GiB", reason=disk.reason, message=disk.path),
    ]


def nvml_missing_checks(reason: str) -> list[Check]:
    return [Check(name=name, level=1, status=Status.unknown, message=reason) for name in ("gpu.count", "driver.version")]


def node_checks(node: NodeSnapshot, t: Thresholds, expect: Expectations) -> list[Check]:
    checks = [_count(node, expect), _driver(node, expect), _driver_cuda(node, expect)]
    for gpu in node.gpus:
        checks += per_gpu_checks(gpu, t, multi_gpu=len(node.gpus) > 1)
    return checks


def _count(node: NodeSnapshot, expect: Expectations) -> Check:
    n = len(node.gpus)
    if expect.gpus is None:
        status, threshold = (Status.ok if n > 0 else Status.critical), ">= 1"
    else:
        status = Status.critical if n < expect.gpus else Status.warn if n > expect.gpus else Status.ok
        threshold = f"== {expect.gpus}"
    return Check(name="gpu.count", level=1, status=status, value=n, threshold=threshold, unit="GPUs")


def _driver(node: NodeSnapshot, expect: Expectations) -> Check:
    name = "driver.version"
    if node.driver_version is None:
        return Check(name=name, level=1, status=Status.unknown, message=node.unavailable.get("driver_version", ""))
    if expect.min_driver is None:
        return Check(name=name, level=1, status=Status.ok, value=node.driver_version, message="no minimum known: pass --min-driver")
    try:
        below = Version(node.driver_version) < Version(expect.min_driver)
    except InvalidVersion:
        return Check(
            name=name,
            level=1,
            status=Status.unknown,
            value=node.driver_version,
            threshold=f">= {expect.min_driver}",
            message="driver version is not comparable",
        )
    return Check(
        name=name,
        level=1,
        status=Status.critical if below else Status.ok,
        value=node.driver_version,
        threshold=f">= {expect.min_driver}",
        message=expect.min_driver_source,
    )


def _driver_cuda(node: NodeSnapshot, expect: Expectations) -> Check:
    """The newest CUDA the driver supports, against the CUDA that torch was built for."""
    name = "driver.cuda"
    if node.cuda_driver_version is None:
        return Check(name=name, level=1, status=Status.unknown, message=node.unavailable.get("cuda_driver_version", ""))
    major, minor = divmod(node.cuda_driver_version, 1000)
    have = f"{major}.{minor // 10}"
    if expect.runtime_cuda is None:
        return Check(name=name, level=1, status=Status.ok, value=have, message="no CUDA build of torch to compare with")
    # Within one major version, CUDA's minor-version compatibility lets an older driver run newer runtimes.
    need_major = Version(expect.runtime_cuda).major
    status = Status.critical if major < need_major else Status.ok
    return Check(name=name, level=1, status=status, value=have, threshold=f">= {need_major}.x (torch built for CUDA {expect.runtime_cuda})")


def per_gpu_checks(g: GpuSnapshot, t: Thresholds, *, multi_gpu: bool) -> list[Check]:
    why = g.unavailable.get
    i = g.index
    return [
        _persistence(g),
        _ecc_mode(g),
        limit_check(
            "ecc.volatile_uncorrected",
            g.ecc_volatile_uncorrected,
            t.ecc_volatile_uncorrected,
            "errors",
            gpu=i,
            reason=why("ecc_volatile_uncorrected", ""),
        ),
        limit_check(
            "ecc.aggregate_uncorrected",
            g.ecc_aggregate_uncorrected,
            t.ecc_aggregate_uncorrected,
            "errors",
            gpu=i,
            reason=why("ecc_aggregate_uncorrected", ""),
        ),
        limit_check(
            "ecc.volatile_corrected",
            g.ecc_volatile_corrected,
            t.ecc_volatile_corrected,
            "errors",
            gpu=i,
            reason=why("ecc_volatile_corrected", ""),
        ),
        *_rows(g, t),
        _retired(g, t),
        _clock_events(g),
        limit_check(
            "clocks.sm_max",
            g.max_clock_sm_mhz,
            t.sm_clock_max_mhz,
            "MHz",
            gpu=i,
            reason=why("max_clock_sm_mhz", ""),
            message=f"now {g.clock_sm_mhz} MHz",
        ),
        limit_check("temperature", g.temperature_c, t.temperature_c, "C", gpu=i, reason=why("temperature_c", "")),
        _nvlink(g, t, multi_gpu),
    ]


def _persistence(g: GpuSnapshot) -> Check:
    if g.persistence_mode is None:
        return Check(
            name="persistence_mode", level=1, gpu=g.index, status=Status.unknown, message=g.unavailable.get("persistence_mode", "")
        )
    on = g.persistence_mode == 1
    return Check(
        name="persistence_mode",
        level=1,
        gpu=g.index,
        status=Status.ok if on else Status.warn,
        value="on" if on else "off",
        threshold="on",
        message="" if on else "off: the driver unloads between jobs and the first CUDA call is slow",
    )


def _ecc_mode(g: GpuSnapshot) -> Check:
    if g.ecc_current is None:
        return Check(name="ecc.mode", level=1, gpu=g.index, status=Status.unknown, message=g.unavailable.get("ecc_mode", ""))
    on = g.ecc_current == 1
    pending = "" if g.ecc_pending == g.ecc_current else f"; {'on' if g.ecc_pending else 'off'} after the next reset"
    return Check(
        name="ecc.mode",
        level=1,
        gpu=g.index,
        status=Status.ok if on else Status.warn,
        value="on" if on else "off",
        threshold="on",
        message=pending.lstrip("; "),
    )


def _rows(g: GpuSnapshot, t: Thresholds) -> list[Check]:
    reason = g.unavailable.get("remapped_rows", "")
    count = limit_check(
        "rows.remapped_uncorrectable",
        g.remapped_uncorrectable,
        t.remapped_rows_uncorrectable,
        "rows",
        gpu=g.index,
        reason=reason,
        message=f"{g.remapped_correctable} correctable",
    )
    if g.remap_failure is None:
        state = Check(name="rows.remap_state", level=1, gpu=g.index, status=Status.unknown, message=reason)
    elif g.remap_failure:
        state = Check(
            name="rows.remap_state",
            level=1,
            gpu=g.index,
            status=Status.critical,
            value="failed",
            message="a row remap failed: the GPU needs service",
        )
    elif g.remap_pending:
        state = Check(
            name="rows.remap_state",
            level=1,
            gpu=g.index,
            status=Status.warn,
            value="pending",
            message="a remap waits for the next GPU reset",
        )
    else:
        state = Check(name="rows.remap_state", level=1, gpu=g.index, status=Status.ok, value="none pending")
    return [count, state]


def _retired(g: GpuSnapshot, t: Thresholds) -> Check:
    name = "retired_pages"
    if g.retired_pages is None:
        reason = g.unavailable.get("retired_pages_sbe", "") or g.unavailable.get("retired_pages_dbe", "")
        # GPUs since Ampere remap rows instead of retiring pages and answer NotSupported.
        if "NotSupported" in reason and g.remap_failure is not None:
            return Check(name=name, level=1, gpu=g.index, status=Status.ok, message="not used: this GPU remaps rows")
        return Check(name=name, level=1, gpu=g.index, status=Status.unknown, message=reason)
    check = limit_check(name, g.retired_pages, t.retired_pages, "pages", gpu=g.index)
    if g.retired_pages_pending and check.status is Status.ok:
        return check.model_copy(update={"status": Status.warn, "message": "a retirement waits for the next reset"})
    return check


def _clock_events(g: GpuSnapshot) -> Check:
    name = "clocks.events"
    if g.clocks_event_reasons is None:
        return Check(name=name, level=1, gpu=g.index, status=Status.unknown, message=g.unavailable.get("clocks_event_reasons", ""))
    return clock_events_check(g.clocks_event_reasons, gpu=g.index, level=1)


def clock_events_check(mask: int, *, gpu: int, level: int, name: str = "clocks.events") -> Check:
    """Verdict on a clock-event (throttle) reason mask: hardware slowdowns are critical."""
    names = decode_reasons(mask)
    severity = [Status(CLOCK_REASONS[bit][1]) for bit in CLOCK_REASONS if mask & bit]
    status = max(severity, key=lambda s: s.rank, default=Status.ok)
    return Check(
        name=name,
        level=level,
        gpu=gpu,
        status=status,
        value=", ".join(names) or "none",
        threshold="no hw_slowdown, hw_thermal, hw_power_brake (critical); no sw_thermal (warn)",
        message=f"mask 0x{mask:x}",
    )


def _nvlink(g: GpuSnapshot, t: Thresholds, multi_gpu: bool) -> Check:
    name = "nvlink.links_up"
    if g.nvlink_up is None or g.nvlink_up + (g.nvlink_down or 0) == 0:
        if not t.nvlink_links:
            return Check(name=name, level=1, gpu=g.index, status=Status.ok, value=0, unit="links", message="no NVLink on this GPU model")
        return Check(
            name=name,
            level=1,
            gpu=g.index,
            status=Status.unknown if multi_gpu else Status.ok,
            unit="links",
            threshold=f">= {t.nvlink_links}",
            message=("no link answered" + ("" if multi_gpu else "; one GPU: NVLink not needed")),
        )
    expected = t.nvlink_links or g.nvlink_up + (g.nvlink_down or 0)
    if g.nvlink_up >= expected:
        status, note = Status.ok, ""
    elif multi_gpu:
        status, note = Status.critical, f"{g.nvlink_down} links down: all-reduce over NVLink degrades"
    else:
        status, note = Status.ok, "one GPU: NVLink not needed"
    return Check(name=name, level=1, gpu=g.index, status=status, value=g.nvlink_up, threshold=f">= {expected}", unit="links", message=note)

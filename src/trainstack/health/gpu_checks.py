"""Level 2 and 3 checks: run the measurements on each GPU and judge them against the thresholds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainstack.health import measure
from trainstack.health.allreduce import AllreduceFailed, run_allreduce
from trainstack.health.level1 import clock_events_check, limit_check
from trainstack.health.nvml import NvmlSource
from trainstack.health.schema import Check, Status
from trainstack.health.sustained import sustained_gemm
from trainstack.health.thresholds import Thresholds

LEVEL2_NAMES = ("gemm.bf16", "gemm.correctness", "copy.device", "copy.h2d", "copy.d2h")
LEVEL3_NAMES = ("allreduce.busbw", "gemm.sustained", "gemm.sustained_drop", "clocks.under_load")


def unknown_checks(names: tuple[str, ...], level: int, reason: str) -> list[Check]:
    return [Check(name=name, level=level, status=Status.unknown, message=reason) for name in names]


def skip_checks(names: tuple[str, ...], level: int, reason: str) -> list[Check]:
    """Checks that do not apply to this node (no GPU): they pass, and say why."""
    return [Check(name=name, level=level, status=Status.skip, message=reason) for name in names]


HOST_GEMM_N = 1024  # about 2 GFLOP a product: tens of ms on one CPU thread, spanning a CPU quota's periods


def host_rates(*, gemm_n: int = HOST_GEMM_N, copy_bytes: int = 64 * 1024**2) -> list[Check]:
    """The host's own GEMM and memory-copy rates on one thread, measured where there is no GPU:
    no threshold judges them (status ok); the fleet report compares them across nodes."""
    import torch

    cpu = torch.device("cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = measure.gemm(cpu, n=gemm_n, warmup=1, repeats=5, check_rows=64)
        c = measure.device_copy(cpu, nbytes=copy_bytes, warmup=1, repeats=5)
    finally:
        torch.set_num_threads(threads)
    ok = g.finite and c.exact
    return [
        Check(
            name="host.gemm_bf16",
            level=2,
            status=Status.ok if ok else Status.critical,
            value=float(f"{g.rate.value:.4g}"),
            unit="TFLOP/s",
            message=f"CPU, 1 thread, {gemm_n}^3, median of {g.rate.repeats}" + ("" if g.finite else "; non-finite product"),
        ),
        Check(
            name="host.copy",
            level=2,
            status=Status.ok if c.exact else Status.critical,
            value=float(f"{c.rate.value:.4g}"),
            unit="GB/s",
            message=f"CPU memory, 1 thread, read + write, median of {c.rate.repeats}",
        ),
    ]


def level2(device: Any, t: Thresholds, *, gpu: int, gemm_n: int = 8192, copy_bytes: int = measure.GIB) -> list[Check]:
    """GEMM rate and correctness, device copy and pinned host copies on one device (NVML index ``gpu``)."""
    i = gpu
    g = measure.gemm(device, n=gemm_n)
    rate_note = f"{gemm_n}^3, median of {g.rate.repeats}"
    if not g.finite:
        correctness = Check(
            name="gemm.correctness",
            level=2,
            gpu=i,
            status=Status.critical,
            value="non-finite",
            message="the product holds NaN or Inf (or unwritten elements)",
        )
    else:
        correctness = limit_check(
            "gemm.correctness",
            g.relative_error,
            t.gemm_relative_error,
            "rel. error",
            gpu=i,
            level=2,
            message="bf16 rows vs float64 reference",
        )
    checks = [
        limit_check("gemm.bf16", g.rate.value, t.gemm_bf16_tflops, "TFLOP/s", gpu=i, level=2, message=rate_note),
        correctness,
        _copy("copy.device", measure.device_copy(device, nbytes=copy_bytes), t.copy_gbps, i, "read + write"),
        _copy("copy.h2d", measure.host_copy(device, "h2d", nbytes=copy_bytes), t.h2d_gbps, i, "pinned"),
        _copy("copy.d2h", measure.host_copy(device, "d2h", nbytes=copy_bytes), t.d2h_gbps, i, "pinned"),
    ]
    return checks


def _copy(name: str, r: measure.CopyResult, limit: Any, gpu: int | None, note: str) -> Check:
    if not r.exact:
        return Check(
            name=name,
            level=2,
            gpu=gpu,
            status=Status.critical,
            value=round(r.rate.value, 1),
            unit="GB/s",
            message="the copy does not equal its source",
        )
    return limit_check(name, r.rate.value, limit, "GB/s", gpu=gpu, level=2, message=f"{note}, median of {r.rate.repeats}")


def allreduce_check(nprocs: int, t: Thresholds, *, backend: str, nbytes: int, runner: Callable[..., Any] = run_allreduce) -> Check:
    """All-reduce bus bandwidth over ``nprocs`` ranks started by torchrun."""
    name = "allreduce.busbw"
    if nprocs < 2:
        return Check(name=name, level=3, status=Status.ok, unit="GB/s", message="skip: one GPU, no peer to reduce with")
    try:
        r = runner(nprocs, backend=backend, nbytes=nbytes)
    except AllreduceFailed as exc:
        return Check(name=name, level=3, status=Status.critical, unit="GB/s", message=str(exc))
    note = f"{r.world_size} ranks, {backend}, {r.bytes / 2**30:g} GiB, algbw {r.algbw_gbps:.1f} GB/s"
    if not r.correct:
        return Check(name=name, level=3, status=Status.critical, value=round(r.busbw_gbps, 2), unit="GB/s", message=f"wrong sum; {note}")
    return limit_check(name, r.busbw_gbps, t.allreduce_busbw_gbps, "GB/s", level=3, message=note)


def sustained_checks(
    devices: list[Any], seconds: float, nvml: NvmlSource | None, t: Thresholds, gpu_ids: list[int], *, n: int = 8192, window_s: float = 1.0
) -> list[Check]:
    checks: list[Check] = []
    for s in sustained_gemm(devices, seconds, nvml, gpu_ids=gpu_ids, n=n, window_s=window_s):
        note = f"{len(s.window_tflops)} windows over {seconds:g} s"
        checks += [
            limit_check("gemm.sustained", s.median_tflops, t.sustained_gemm_tflops, "TFLOP/s", gpu=s.gpu, level=3, message=note),
            limit_check(
                "gemm.sustained_drop",
                s.drop_ratio,
                t.sustained_gemm_ratio,
                "slowest/first",
                gpu=s.gpu,
                level=3,
                message=f"slowest window {min(s.window_tflops):.1f} TFLOP/s",
            ),
        ]
        if s.samples:
            watch = clock_events_check(s.reasons_mask, gpu=s.gpu, level=3, name="clocks.under_load")
            extra = f"; {s.samples} samples, max {s.max_temperature_c} C, min SM {s.min_sm_clock_mhz} MHz"
            checks.append(watch.model_copy(update={"message": watch.message + extra}))
        else:
            checks.append(Check(name="clocks.under_load", level=3, gpu=s.gpu, status=Status.unknown, message="no NVML: clocks not watched"))
    return checks

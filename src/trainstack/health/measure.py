"""Level 2 measurements on one device through torch: GEMM rate and correctness, copy bandwidths.

Timing follows one rule everywhere: warm-up first, then each repeat timed on its own
(CUDA events on a GPU, the wall clock on a CPU), and the median reported. Inputs are
random, never zeros, which run faster than real data and hide unwritten outputs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GIB = 1024**3


@dataclass(frozen=True)
class Rate:
    """A median rate over timed repeats."""

    value: float  # in the unit of the measurement (TFLOP/s, GB/s)
    median_s: float
    repeats: int


def time_repeats(fn: Callable[[], Any], device: Any, *, warmup: int, repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` on ``device``, after ``warmup`` untimed calls."""
    import torch

    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return times
    with torch.cuda.device(device):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
        torch.cuda.synchronize()
        for begin, end in events:
            begin.record()
            fn()
            end.record()
        torch.cuda.synchronize()
    return [begin.elapsed_time(end) / 1000 for begin, end in events]


def _median_rate(amount: float, times: list[float]) -> Rate:
    median = statistics.median(times)
    return Rate(amount / median, median, len(times))


@dataclass(frozen=True)
class GemmResult:
    rate: Rate  # TFLOP/s
    relative_error: float  # ||C - ref|| / ||ref|| on a slice of rows, ref in float64
    finite: bool


def gemm(device: Any, *, n: int = 8192, warmup: int = 5, repeats: int = 30, check_rows: int = 256) -> GemmResult:
    """bf16 ``n``x``n``x``n`` product rate, and its error against a float64 product on ``check_rows`` rows."""
    import torch

    with torch.device(device):
        a = torch.randn(n, n, dtype=torch.bfloat16)  # (n, n)
        b = torch.randn(n, n, dtype=torch.bfloat16)  # (n, n)
        c = torch.full((n, n), float("nan"), dtype=torch.bfloat16)  # poisoned: every element must be written
    times = time_repeats(lambda: torch.matmul(a, b, out=c), device, warmup=warmup, repeats=repeats)
    rows = slice(0, min(check_rows, n))
    ref = a[rows].double() @ b.double()  # (check_rows, n)
    got = c[rows].double()
    finite = bool(torch.isfinite(c).all())
    rel = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref)) if finite else float("inf")
    rate = _median_rate(2 * n**3 / 1e12, times)
    return GemmResult(rate, rel, finite)


@dataclass(frozen=True)
class CopyResult:
    rate: Rate  # GB/s (1e9 bytes per second)
    exact: bool  # the destination equals the source after the copies


def device_copy(device: Any, *, nbytes: int = GIB, warmup: int = 3, repeats: int = 30) -> CopyResult:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    import torch

    numel = nbytes // 4
    src = torch.randn(numel, device=device)  # (numel,) float32
    dst = torch.empty_like(src)
    times = time_repeats(lambda: dst.copy_(src), device, warmup=warmup, repeats=repeats)
    exact = bool(torch.equal(dst, src))
    return CopyResult(_median_rate(2 * numel * 4 / 1e9, times), exact)


def host_copy(device: Any, direction: str, *, nbytes: int = GIB, warmup: int = 3, repeats: int = 20) -> CopyResult:
    """Pinned host-to-device (``h2d``) or device-to-host (``d2h``) bandwidth, bytes over the bus."""
    import torch

    numel = nbytes // 4
    pinned = device.type == "cuda"
    host = torch.randn(numel).pin_memory() if pinned else torch.randn(numel)  # (numel,) float32
    dev = torch.randn(numel, device=device)
    if direction == "h2d":
        src, dst = host, dev
    elif direction == "d2h":
        src, dst = dev, (torch.empty(numel).pin_memory() if pinned else torch.empty(numel))
    else:
        raise ValueError(f"direction must be h2d or d2h, not {direction!r}")
    times = time_repeats(lambda: dst.copy_(src, non_blocking=pinned), device, warmup=warmup, repeats=repeats)
    exact = bool(torch.equal(dst.cpu(), src.cpu()))
    return CopyResult(_median_rate(numel * 4 / 1e9, times), exact)

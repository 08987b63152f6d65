"""Level 3 sustained GEMM: bf16 products for a set time on every GPU at once, clocks watched by NVML.

A card that cools or feeds itself badly holds its rate for seconds, then drops: the
check compares the slowest one-second window with the first windows, and keeps the
clock-event reasons seen while the products ran.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from trainstack.health.measure import time_repeats
from trainstack.health.nvml import NvmlSource


@dataclass
class Sustained:
    gpu: int
    window_tflops: list[float] = field(default_factory=list)
    reasons_mask: int = 0  # OR of every clock-event reason mask sampled under load
    max_temperature_c: int | None = None
    min_sm_clock_mhz: int | None = None
    samples: int = 0

    @property
    def median_tflops(self) -> float:
        return statistics.median(self.window_tflops)

    @property
    def drop_ratio(self) -> float:
        """Slowest window over the median of the first three: 1.0 means no drop."""
        head = statistics.median(self.window_tflops[:3])
        return min(self.window_tflops) / head


def sustained_gemm(
    devices: list[Any],
    seconds: float,
    nvml: NvmlSource | None,
    *,
    gpu_ids: list[int],
    n: int = 8192,
    window_s: float = 1.0,
    sample_s: float = 0.5,
) -> list[Sustained]:
    """Run bf16 products on all ``devices`` for ``seconds``, one worker thread per device.

    ``gpu_ids`` are the NVML indexes of ``devices`` (CUDA_VISIBLE_DEVICES can renumber them).
    """
    results = [Sustained(gpu=g) for g in gpu_ids]
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(nvml, results, stop, sample_s), daemon=True) if nvml else None
    workers = [threading.Thread(target=_run, args=(d, r, seconds, n, window_s), daemon=True) for d, r in zip(devices, results)]
    if watcher:
        watcher.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    if watcher:
        watcher.join()
    return results


def _run(device: Any, out: Sustained, seconds: float, n: int, window_s: float) -> None:
    import torch

    with torch.device(device):
        a = torch.randn(n, n, dtype=torch.bfloat16)  # (n, n)
        b = torch.randn(n, n, dtype=torch.bfloat16)  # (n, n)
        c = torch.empty(n, n, dtype=torch.bfloat16)
    flop = 2 * n**3
    # Size a window from one timed product so that each window lasts about window_s.
    probe = statistics.median(time_repeats(lambda: torch.matmul(a, b, out=c), device, warmup=3, repeats=5))
    per_window = max(1, round(window_s / probe))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or len(out.window_tflops) < 3:
        times = time_repeats(lambda: torch.matmul(a, b, out=c), device, warmup=0, repeats=per_window)
        out.window_tflops.append(flop * len(times) / sum(times) / 1e12)


def _watch(nvml: NvmlSource, results: list[Sustained], stop: threading.Event, period: float) -> None:
    while not stop.wait(period):
        for r in results:
            s = nvml.sample(r.gpu)
            if isinstance(s["clocks_event_reasons"], int):
                r.reasons_mask |= s["clocks_event_reasons"]
            if isinstance(s["temperature_c"], int):
                r.max_temperature_c = max(r.max_temperature_c or 0, s["temperature_c"])
            if isinstance(s["clock_sm_mhz"], int):
                r.min_sm_clock_mhz = min(r.min_sm_clock_mhz or 10**6, s["clock_sm_mhz"])
            r.samples += 1

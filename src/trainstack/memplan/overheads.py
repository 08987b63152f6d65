"""What the GPU adds on top of the fake-tensor calibration, as measured on an H200.

``workspace``: measured max_memory_allocated minus the model's prediction was 64.2 MiB on
every uncapped run of benchmarks/memplan_h200.py (125m and 1b, kept and fully recomputed,
torch 2.11): cuBLAS's workspaces, which go through the caching allocator.
``fragmentation``: with expandable segments, reserved exceeded allocated by at most 0.6% on
the runs that ended within 3% of a capped budget (the allocator releases cached blocks
before failing), and by 2-13% uncapped, where it has no reason to; 2% is planned for.
"""

from __future__ import annotations

from trainstack.memplan.plan import Overheads

MiB = 1 << 20

H200 = Overheads(workspace=65 * MiB, fragmentation=0.02)


def default_overheads() -> Overheads:
    return H200

"""What the GPU adds on top of the fake-tensor calibration, as measured on an H200.

``workspace``: measured max_memory_allocated minus the model's prediction was 64.2 MiB on
every uncapped run of benchmarks/memplan_h200.py (125m and 1b, kept and fully recomputed,
torch 2.11): cuBLAS's workspaces, which go through the caching allocator.
``fragmentation``: the room the caching allocator (expandable segments) needs above the
allocated peak so that it never has to release cached memory and retry an allocation at
the cap. Those retries (torch.cuda.memory_stats num_alloc_retries) slow a step by up to
16%: of the capped runs of benchmarks/memplan_h200.py whose budget was less than 4.7% above
their allocated peak, 7 of 9 retried 20-66 times in 20 steps; of those with 8% or more to
spare, one retried (twice). 5% is planned for.
"""

from __future__ import annotations

from trainstack.memplan.plan import Overheads

MiB = 1 << 20

H200 = Overheads(workspace=65 * MiB, fragmentation=0.05)


def default_overheads() -> Overheads:
    return H200

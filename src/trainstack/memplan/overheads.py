"""What the GPU adds on top of the fake-tensor calibration, as measured on an H200.

``workspace``: measured max_memory_allocated minus the model's prediction was 64.2 MiB on
every uncapped run of benchmarks/memplan_h200.py (125m and 1b, kept and fully recomputed,
torch 2.11): cuBLAS's workspaces, which go through the caching allocator.

The room above the allocated peak: what the caching allocator (expandable segments) holds
beyond what is allocated, so that at the cap it need not release its cache and retry an
allocation (torch.cuda.memory_stats num_alloc_retries; such retries slowed steps by up to
16% while the loss allocated its chunk's logits afresh in every chunk). Since the loss
reuses one logits buffer across its chunks, no capped run of the grid of 2026-12-03 retried
(40 runs, 12 cases from 125m to 3b), also with 0.23-0.31 GiB left below the cap, and where
any block was kept the reserved peak exceeded the allocated one by at most 0.30 GiB (0.0-1.1%
of it). The room planned for is the larger of 0.2% of the allocated peak and 0.1 of the
step's largest single allocation (the loss's fp32 logits buffer: 0.49 GiB for 125m, 1.96
GiB for 1b and 3b).
"""

from __future__ import annotations

from trainstack.memplan.costs import Overheads

MiB = 1 << 20

H200 = Overheads(workspace=65 * MiB, fragmentation=0.002, largest_room=0.1)


def default_overheads() -> Overheads:
    return H200

"""What the GPU adds on top of the fake-tensor calibration, as measured on an H200.

``workspace``: measured max_memory_allocated minus the model's prediction was 64.2 MiB on
every uncapped run of benchmarks/memplan_h200.py (125m and 1b, kept and fully recomputed,
torch 2.11): cuBLAS's workspaces, which go through the caching allocator.

``largest_room``: the room the caching allocator (expandable segments) needs above the
allocated peak so that it never has to release cached memory and retry an allocation at
the cap. Those retries (torch.cuda.memory_stats num_alloc_retries) slow a step by up to
16%. What decides them is the room left relative to the step's largest single allocation
(the loss chunk's fp32 logits: 0.49 GiB for 125m, 1.96 GiB for 1b and 3b), not relative to
the budget. Of the 55 capped eager runs of the 50b4f9e and 962760e grids, 11 of the 12
left with 0.30-0.77 of it retried 20-66 times in 20 steps (the other, twice); none of the
43 left with 0.92 or more retried more than twice (3b every-3 at 75 GiB, 3.5% of the
budget to spare: no retry; 125m every-3 at 12 GiB, 3.1% to spare: 64). 0.9 of the
largest allocation is planned for.
"""

from __future__ import annotations

from trainstack.memplan.plan import Overheads

MiB = 1 << 20

H200 = Overheads(workspace=65 * MiB, largest_room=0.25)


def default_overheads() -> Overheads:
    return H200

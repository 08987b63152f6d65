"""The memory model: the live bytes of one training step, phase by phase, from a calibration.

A step is: forward through the blocks, loss; backward of the loss, of the blocks from last
to first, of the embedding; optimizer step. Weights and optimizer state live throughout;
gradients appear as backward reaches their block; each block's saved bytes live from its
forward to its backward. The peak is the largest sum over those phases. Pure arithmetic.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace
from itertools import accumulate

from trainstack.memplan.costs import BlockCost, Breakdown, Choice, Overheads, Profile

# FSDP keeps this many blocks' parameters unsharded at once (the one computing, the one prefetched).
FSDP_UNSHARDED_BLOCKS = 2


def _shard(nbytes: int, world_size: int) -> int:
    return -(-nbytes // world_size)


def breakdown(profile: Profile, choices: Sequence[Choice], *, world_size: int = 1, overheads: Overheads = Overheads()) -> Breakdown:
    """Predicted peak of one step (after the first, once optimizer state exists)."""
    if len(choices) != profile.n_blocks:
        raise ValueError(f"{len(choices)} choices for {profile.n_blocks} blocks")
    pb = profile.block_param_bytes
    weights = _shard(profile.n_blocks * pb + profile.other_param_bytes, world_size)
    block_state, other_state = profile.state_bytes()
    optimizer = _shard(profile.n_blocks * block_state + other_state, world_size)
    block_grad_bytes, other_grad_bytes = profile.grad_bytes()
    block_grad = _shard(block_grad_bytes, world_size)
    all_grads = _shard(profile.n_blocks * block_grad_bytes + other_grad_bytes, world_size)
    # FSDP gathers a block's parameters for its forward and backward, and reduces its gradients.
    gathered = 0 if world_size == 1 else FSDP_UNSHARDED_BLOCKS * pb + pb
    static = weights + optimizer + profile.buffer_bytes
    cost = [profile.options[c] for c in choices]
    saved = [c.saved for c in cost]
    before = [0, *accumulate(saved)]  # before[i]: saved bytes of blocks 0..i-1
    held = [0, *accumulate(c.held for c in cost)]  # the same during the forward pass
    total_saved = before[-1]
    head = profile.head

    phases: list[tuple[str, int, int, int]] = []  # (name, grads, saved, transient)
    shared = head.shared  # masks and position embeddings the blocks are given
    for i, c in enumerate(cost):
        phases.append((f"forward of block {i}", 0, held[i], shared + c.fwd_peak + gathered))
    # what the blocks are handed but kept blocks do not save, a recomputing block holds until its backward
    holding = list(accumulate((c is not Choice.KEEP for c in choices), operator.or_))  # any of blocks 0..i recomputes
    unkept = [head.unkept_shared if h else 0 for h in holding]
    # the blocks' input, once: where the head holds it and the first block saves it too
    twice = min(head.holds_input, cost[0].saved_input) if cost else 0
    phases.append(("loss forward", 0, held[-1] - twice, head.fwd_peak + (head.unkept_loss if holding[-1] else 0)))
    phases.append(("loss backward", 0, total_saved - twice, head.bwd_peak + unkept[-1]))
    for i in reversed(range(len(cost))):
        grads = (len(cost) - 1 - i) * block_grad
        # the gradient the blocks accumulate for a shared input: from the second block's backward on
        # (the first's is part of its own backward's bytes)
        shared_grad = head.shared_grad if i < len(cost) - 1 else 0
        phases.append((f"backward of block {i}", grads, before[i] - (twice if i else 0),
                       head.after_bwd + shared_grad + unkept[i] + cost[i].bwd_peak - (0 if i else twice) + gathered))
    phases.append(("embedding backward", len(cost) * block_grad, 0, head.embed_bwd_peak))
    phases.append(("optimizer step", all_grads, 0, _shard(profile.step_scratch, world_size)))
    name, grads, live_saved, transient = max(phases, key=lambda p: p[1] + p[2] + p[3])

    allocated = static + grads + live_saved + transient + overheads.workspace
    overhead = max(int(allocated * overheads.fragmentation), int(profile.largest_allocation * overheads.largest_room))
    return Breakdown(
        weights=weights + profile.buffer_bytes,
        grads=grads,
        optimizer=optimizer,
        saved_activations=live_saved,
        saved_per_block={c: profile.options[c].saved for c in profile.options},
        transient=transient,
        transient_phase=name,
        transients=_largest_transients(profile),
        workspace=overheads.workspace,
        allocated_peak=allocated,
        allocator_overhead=overhead,
        reserved_peak=allocated + overhead,
    )


def _largest_transients(profile: Profile) -> dict[str, int]:
    keep = profile.options[Choice.KEEP]
    return {
        "logits and loss chunk": profile.head.fwd_peak,
        "block backward (attention and MLP workspace)": keep.bwd_peak - keep.saved,
        "block being recomputed": max(o.bwd_peak - o.saved for o in profile.options.values()),
    }


def peak_bytes(profile: Profile, choices: Sequence[Choice], *, world_size: int = 1, overheads: Overheads = Overheads()) -> int:
    return breakdown(profile, choices, world_size=world_size, overheads=overheads).reserved_peak


def with_measured_memory(profile: Profile, blocks: dict[Choice, BlockCost]) -> Profile:
    """The profile with each choice's bytes (saved, held, forward and backward peaks) from
    a real block (realblock.measure_real); recompute costs unchanged."""
    options = {
        c: replace(o, saved=blocks[c].saved, held=blocks[c].held, fwd_peak=blocks[c].fwd_peak, bwd_peak=blocks[c].bwd_peak, saved_input=blocks[c].saved_input)
        for c, o in profile.options.items()
    }
    return replace(profile, options=options)


def with_measured_times(profile: Profile, block_seconds: dict[Choice, float]) -> Profile:
    """The profile with recompute costs from a timed block (forward + backward, per choice).

    A timed block includes what the roofline leaves out: kernels below their peak rates and
    the host's dispatch (selective recompute runs each op through a Python dispatch mode).
    """
    keep = block_seconds[Choice.KEEP]
    options = {c: replace(o, recompute_seconds=max(0.0, block_seconds[c] - keep), host_seconds=0.0) for c, o in profile.options.items()}
    return replace(profile, options=options, step_seconds=profile.n_blocks * keep + profile.head_seconds, step_host_seconds=0.0)


def step_seconds(profile: Profile, counts: dict[Choice, int]) -> float:
    """Estimated step time: the GPU's work or the host's issuing of it, whichever is longer."""
    gpu = profile.step_seconds + sum(n * profile.options[c].recompute_seconds for c, n in counts.items())
    host = profile.step_host_seconds + sum(n * profile.options[c].host_seconds for c, n in counts.items())
    return max(gpu, host)


def recompute_fractions(profile: Profile, choices: Sequence[Choice]) -> tuple[float, float]:
    """(recompute FLOPs / step FLOPs, estimated extra step time / estimated step time without recompute)."""
    counts = {c: list(choices).count(c) for c in set(choices)}
    flops = sum(profile.options[c].recompute_flops for c in choices)
    base = step_seconds(profile, {})
    extra = step_seconds(profile, counts) - base
    return flops / profile.step_flops if profile.step_flops else 0.0, extra / base if base else 0.0

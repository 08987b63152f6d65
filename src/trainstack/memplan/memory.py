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
from trainstack.memplan.placement import CHUNK_BYTES, KINDS, SHARDED_KINDS, Layout, Where, layout_for
from trainstack.memplan.placement import shard as _shard

# FSDP keeps this many blocks' parameters unsharded at once (the one computing, the one prefetched).
FSDP_UNSHARDED_BLOCKS = 2


def state_totals(profile: Profile) -> dict[str, int]:
    """The whole model's bytes of each kind of state (placement.KINDS), before any sharding."""
    block_state, other_state = profile.state_bytes()
    block_grad, other_grad = profile.grad_bytes()
    n = profile.n_blocks
    master = n * profile.block_master_bytes + profile.other_master_bytes
    return {
        "params": n * profile.block_param_bytes + profile.other_param_bytes,
        "grads": n * block_grad + other_grad,
        "master": master,
        "optimizer": n * block_state + other_state - master,
    }


def host_bytes(profile: Profile, layout: Layout) -> int:
    """What one rank keeps in host memory: its offloaded state, and where the CPU steps the
    optimizer on gradients kept on the GPU, two fp32 chunks of them in flight (never a full copy)."""
    totals = state_totals(profile)
    held = sum(layout.host_bytes(k, totals[k]) for k in KINDS)
    if layout.cpu_step and "grads" not in layout.offload:
        held += min(2 * CHUNK_BYTES, layout.host_bytes("master", totals["master"]))
    return held


def per_kind(profile: Profile, layout: Layout) -> dict[str, dict]:
    totals = state_totals(profile)
    return {k: {"where": str(layout.where(k)), "gpu_bytes": layout.gpu_bytes(k, totals[k]), "host_bytes": layout.host_bytes(k, totals[k]), "total_bytes": totals[k]}
            for k in KINDS}


def breakdown(profile: Profile, choices: Sequence[Choice], *, world_size: int = 1, overheads: Overheads = Overheads(),
              layout: Layout | None = None, accum: int = 1) -> Breakdown:
    """Predicted peak of one step (after the first, once optimizer state exists) on one rank.

    ``layout``: the sharding and the kinds of state on the host (default: FSDP2 over
    ``world_size`` ranks, nothing on the host); ``accum``: micro-batches per optimizer step
    (after the first, every micro-batch runs with the gradients accumulated so far)."""
    if len(choices) != profile.n_blocks:
        raise ValueError(f"{len(choices)} choices for {profile.n_blocks} blocks")
    layout = layout or layout_for(None, world_size)
    world_size = layout.world_size
    pb = profile.block_param_bytes
    totals = state_totals(profile)
    weights = layout.gpu_bytes("params", totals["params"])
    optimizer = layout.gpu_bytes("master", totals["master"]) + layout.gpu_bytes("optimizer", totals["optimizer"])
    block_grad_bytes, _ = profile.grad_bytes()
    grads_where = layout.where("grads")
    block_grad = 0 if grads_where is Where.HOST else layout.gpu_bytes("grads", block_grad_bytes)
    # gradients on the host: one block's in flight on the GPU until copied down
    all_grads = _shard(block_grad_bytes, world_size) if grads_where is Where.HOST else layout.gpu_bytes("grads", totals["grads"])
    accumulated = all_grads if accum > 1 and grads_where is not Where.HOST else 0
    # sharded or offloaded parameters are gathered (copied up) a block at a time for its forward
    # and backward, the one computing and the one prefetched, and its gradients reduced
    gathered = FSDP_UNSHARDED_BLOCKS * pb + pb if layout.gathers_params else 0
    if "optimizer" not in layout.offload:
        step_transient = _shard(profile.step_scratch, world_size) if "optimizer" in SHARDED_KINDS[layout.shard] else profile.step_scratch
    elif not layout.cpu_step:  # the state streams up to the GPU's step, two chunks in flight
        step_transient = min(2 * CHUNK_BYTES, layout.host_bytes("optimizer", totals["optimizer"]))
    else:
        step_transient = 0
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
        phases.append((f"forward of block {i}", accumulated, held[i], shared + c.fwd_peak + gathered))
    # what the blocks are handed but kept blocks do not save, a recomputing block holds until its backward
    holding = list(accumulate((c is not Choice.KEEP for c in choices), operator.or_))  # any of blocks 0..i recomputes
    unkept = [head.unkept_shared if h else 0 for h in holding]
    # the blocks' input, once: where the head holds it and the first block saves it too
    twice = min(head.holds_input, cost[0].saved_input) if cost else 0
    phases.append(("loss forward", accumulated, held[-1] - twice, head.fwd_peak + (head.unkept_loss if holding[-1] else 0)))
    phases.append(("loss backward", accumulated, total_saved - twice, head.bwd_peak + unkept[-1]))
    for i in reversed(range(len(cost))):
        grads = max(accumulated, (len(cost) - 1 - i) * block_grad)
        # the gradient the blocks accumulate for a shared input: from the second block's backward on
        # (the first's is part of its own backward's bytes)
        shared_grad = head.shared_grad if i < len(cost) - 1 else 0
        phases.append((f"backward of block {i}", grads, before[i] - (twice if i else 0),
                       head.after_bwd + shared_grad + unkept[i] + cost[i].bwd_peak - (0 if i else twice) + gathered))
    phases.append(("embedding backward", max(accumulated, len(cost) * block_grad), 0, head.embed_bwd_peak))
    phases.append(("optimizer step", all_grads, 0, step_transient))
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
        host_bytes=host_bytes(profile, layout),
        per_kind=per_kind(profile, layout),
    )


def _largest_transients(profile: Profile) -> dict[str, int]:
    keep = profile.options[Choice.KEEP]
    return {
        "logits and loss chunk": profile.head.fwd_peak,
        "block backward (attention and MLP workspace)": keep.bwd_peak - keep.saved,
        "block being recomputed": max(o.bwd_peak - o.saved for o in profile.options.values()),
    }


def peak_bytes(profile: Profile, choices: Sequence[Choice], *, world_size: int = 1, overheads: Overheads = Overheads(),
               layout: Layout | None = None, accum: int = 1) -> int:
    return breakdown(profile, choices, world_size=world_size, overheads=overheads, layout=layout, accum=accum).reserved_peak


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

"""The memory model: the live bytes of one training step, phase by phase, from a calibration.

A step is: forward through the blocks, loss; backward of the loss, of the blocks from last
to first, of the embedding; optimizer step. Weights and optimizer state live throughout;
gradients appear as backward reaches their block; each block's saved bytes live from its
forward to its backward. The peak is the largest sum over those phases. Pure arithmetic.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

from trainstack.memplan.costs import BlockCost, Breakdown, Choice, Overheads, Profile
from trainstack.memplan.placement import (
    CHUNK_BYTES,
    FP32_HOST_GRADS,
    FP32_MASTER_SHARDS,
    KINDS,
    SHARDED_KINDS,
    Layout,
    Where,
    layout_for,
    shard,
)

# FSDP keeps this many blocks' parameters unsharded at once (the one computing, the one prefetched).
FSDP_UNSHARDED_BLOCKS = 2


@dataclass(frozen=True)
class Gathered:
    """What a sharding adds on a rank in each phase of a step, beyond the state it keeps
    sharded: parameters gathered whole, the collectives' buffers. FSDP2 (``fully_shard`` on
    each block and on the model, the last block not resharded after its forward, implicit
    prefetch), as torch 2.13's ``_fsdp_param_group`` schedules it:

    - the model's own group (embedding, final norm, output: ``other``) is gathered at the
      forward's start and stays whole until its post-backward (the root is not resharded
      after its forward);
    - in the forward, a block's all-gather output (one block's parameters whole) is kept until
      the next group's copy-out, beside the block's unsharded parameters; the last block's
      stays until the model's forward ends, so the loss runs beside both;
    - in the backward, a block computes with its own parameters whole and the next block's
      all-gather (prefetched) in flight, and the reduce-scatter input of the block before
      (its gradients whole, in the reduce dtype) is kept until the next reduce-scatter;
    - the reduce-scatter buffers are freed when the backward ends.

    Other layouts that gather (ZeRO-3, parameters on the host) keep ``FSDP_UNSHARDED_BLOCKS``
    blocks whole and one in flight around a block's compute, nothing around the head's."""

    gather: tuple[int, ...] = ()  # at block i's all-gather, before its forward: what is whole then
    forward: tuple[int, ...] = ()  # during block i's forward
    loss_forward: int = 0
    loss_backward: int = 0
    backward: tuple[int, ...] = ()  # during block i's backward
    # at block i's reduce-scatter (its gradients whole and their copy in the reduce-scatter input)
    reduce_scatter: tuple[int, ...] = ()
    embedding_backward: int = 0
    rest_reduce_scatter: int = 0  # at the model's own reduce-scatter, after the embedding's backward


def gathered_bytes(profile: Profile, layout: Layout) -> Gathered:
    n = profile.n_blocks
    none = (0,) * n
    if not layout.gathers_params:
        return Gathered(gather=none, forward=none, backward=none, reduce_scatter=none)
    pb = profile.block_param_bytes
    if layout.shard != "fsdp2" or layout.world_size < 2:
        around = FSDP_UNSHARDED_BLOCKS * pb + pb
        return Gathered(gather=none, forward=(around,) * n, backward=(around,) * n, reduce_scatter=none)
    other = profile.other_param_bytes
    block_grad, other_grad = profile.grad_bytes()
    # at a block's copy-out: its all-gather output and unsharded parameters, beside the all-gather
    # output before it (the model's own, for the first block), freed only once the copy-out is done
    gather = tuple(other + (other if i == 0 else pb) + 2 * pb for i in range(n))
    forward = (other + 2 * pb,) * n
    prefetched = tuple(pb if i > 0 else 0 for i in range(n))  # the next block's all-gather, issued at this one's pre-backward
    backward = tuple(other + pb + prefetched[i] + (block_grad if i < n - 1 else 0) for i in range(n))
    # the block resharded, the reduce-scatter before it freed: its gradients whole, their copy
    # (the reduce-scatter input) and this rank's part of the sum (its output)
    reduce_scatter = tuple(other + prefetched[i] + 2 * block_grad + shard(block_grad, layout.world_size) for i in range(n))
    return Gathered(
        gather=gather,
        forward=forward,
        loss_forward=other + 2 * pb if n else other,
        loss_backward=other + pb if n else other,
        backward=backward,
        reduce_scatter=reduce_scatter,
        embedding_backward=other + (block_grad if n else 0),
        rest_reduce_scatter=2 * other_grad + shard(other_grad, layout.world_size),
    )


def state_totals(profile: Profile, layout: Layout | None = None) -> dict[str, int]:
    """The whole model's bytes of each kind of state (placement.KINDS), before any sharding.
    Under DeepSpeed's ZeRO (``layout``'s sharding zero1/2/3) the optimizer steps an fp32 copy
    of each partition whatever the parameters' dtype: fp32 master weights also where the
    precision keeps none (fp32 training), 4 bytes a trained element."""
    block_state, other_state = profile.state_bytes()
    block_grad, other_grad = profile.grad_bytes()
    n = profile.n_blocks
    master = n * profile.block_master_bytes + profile.other_master_bytes
    grads = n * block_grad + other_grad
    totals = {
        "params": n * profile.block_param_bytes + profile.other_param_bytes,
        "grads": grads,
        "master": master,
        "optimizer": n * block_state + other_state - master,
    }
    if layout is not None and layout.shard in FP32_MASTER_SHARDS and not master:
        itemsize = profile.largest_param_bytes // profile.largest_param_elements if profile.largest_param_elements else 4
        totals["master"] = grads * 4 // itemsize
    return totals


def host_totals(profile: Profile, layout: Layout) -> dict[str, int]:
    """The whole model's bytes of each kind as the host would hold them: as ``state_totals``,
    but DeepSpeed's ZeRO-Offload keeps the gradients it moves to the host in fp32 (beside its
    fp32 master weights), whatever the parameters' dtype."""
    totals = state_totals(profile, layout)
    if layout.shard in FP32_HOST_GRADS and "grads" in layout.offload:
        totals["grads"] = max(totals["grads"], totals["master"])  # master weights: 4 bytes per trained element
    return totals


def chunk_elements(profile: Profile, layout: Layout) -> int:
    """Elements of the largest chunk an offloaded optimizer streams: ``CHUNK_BYTES`` of fp32
    state, or the rank's part of the largest parameter where that is smaller (a chunk never
    spans two parameters)."""
    largest = profile.largest_param_elements
    if not largest:
        return CHUNK_BYTES // 4
    if layout.world_size > 1 and "master" in SHARDED_KINDS[layout.shard]:
        largest = shard(largest, layout.world_size)
    return min(CHUNK_BYTES // 4, largest)


def staging_bytes(profile: Profile, layout: Layout) -> int:
    """What the CPU's step on gradients kept on the GPU holds in host memory besides the state
    (bench.host_optimizer, never a full copy): two chunks of fp32 gradient the update reads,
    and two pinned chunks each way in the parameters' dtype (gradients down, weights up)."""
    if not (layout.cpu_step and "grads" not in layout.offload):
        return 0
    elements = chunk_elements(profile, layout)
    itemsize = profile.largest_param_bytes // profile.largest_param_elements if profile.largest_param_elements else 2
    return 2 * 4 * elements + 4 * itemsize * elements


def streamed_step_bytes(profile: Profile, layout: Layout) -> int:
    """On the GPU, what a step on optimizer state streamed from the host adds (the state on the
    host, master weights on the GPU): a chunk's two fp32 moments brought up and its gradient
    in fp32 for the fused update."""
    if "optimizer" not in layout.offload or layout.cpu_step:
        return 0
    return 3 * 4 * chunk_elements(profile, layout)


def host_bytes(profile: Profile, layout: Layout) -> int:
    """What one rank keeps in host memory: its offloaded state and, where the CPU steps the
    optimizer on gradients kept on the GPU, the buffers that stream them (``staging_bytes``)."""
    totals = host_totals(profile, layout)
    return sum(layout.host_bytes(k, totals[k]) for k in KINDS) + staging_bytes(profile, layout)


def per_kind(profile: Profile, layout: Layout) -> dict[str, dict]:
    totals, on_host = state_totals(profile, layout), host_totals(profile, layout)
    return {
        k: {
            "where": str(layout.where(k)),
            "gpu_bytes": layout.gpu_bytes(k, totals[k]),
            "host_bytes": layout.host_bytes(k, on_host[k]),
            "total_bytes": totals[k],
        }
        for k in KINDS
    }


@dataclass(frozen=True)
class Phase:
    """One phase of a step on one rank: the bytes live above the static state (weights,
    optimizer state, buffers) while it runs."""

    name: str
    grads: int  # gradients live
    saved: int  # activations saved for the backward
    transient: int  # what the phase itself adds: its workspace, gathered parameters, buffers

    @property
    def total(self) -> int:
        return self.grads + self.saved + self.transient


def static_bytes(profile: Profile, layout: Layout) -> tuple[int, int]:
    """(weights, optimizer state) one rank keeps on its GPU throughout; buffers not included."""
    totals = state_totals(profile, layout)
    weights = layout.gpu_bytes("params", totals["params"])
    optimizer = layout.gpu_bytes("master", totals["master"]) + layout.gpu_bytes("optimizer", totals["optimizer"])
    return weights, optimizer


def phases(profile: Profile, choices: Sequence[Choice], *, layout: Layout, accum: int = 1) -> list[Phase]:
    """Every phase of one step (after the first, once optimizer state exists) on one rank, in order."""
    if len(choices) != profile.n_blocks:
        raise ValueError(f"{len(choices)} choices for {profile.n_blocks} blocks")
    world_size = layout.world_size
    totals = state_totals(profile, layout)
    block_grad_bytes, _ = profile.grad_bytes()
    grads_where = layout.where("grads")
    block_grad = 0 if grads_where is Where.HOST else layout.gpu_bytes("grads", block_grad_bytes)
    # gradients on the host: one block's in flight on the GPU until copied down
    all_grads = shard(block_grad_bytes, world_size) if grads_where is Where.HOST else layout.gpu_bytes("grads", totals["grads"])
    accumulated = _accumulated(totals["grads"], all_grads, layout, accum)
    # sharded or offloaded parameters are gathered (copied up) a block at a time for its forward
    # and backward, and its gradients reduced: what each phase holds whole (Gathered)
    gathered = gathered_bytes(profile, layout)
    if "optimizer" not in layout.offload:
        step_transient = shard(profile.step_scratch, world_size) if "optimizer" in SHARDED_KINDS[layout.shard] else profile.step_scratch
    else:  # the state streams up to the GPU's step a chunk at a time (on the CPU's step: nothing)
        step_transient = streamed_step_bytes(profile, layout)
    # a streamed step starts on a block's final gradients during the last micro-batch's backward
    streaming = streamed_step_bytes(profile, layout)
    cost = [profile.options[c] for c in choices]
    saved = [c.saved for c in cost]
    before = [0, *accumulate(saved)]  # before[i]: saved bytes of blocks 0..i-1
    held = [0, *accumulate(c.held for c in cost)]  # the same during the forward pass
    total_saved = before[-1]
    head = profile.head

    found: list[Phase] = []
    hidden = profile.options[Choice.FULL].saved  # a fully recomputed block saves its input alone
    shared = head.shared  # masks and position embeddings the blocks are given
    for i, c in enumerate(cost):
        if gathered.gather[i]:  # the block's input is alive beside what it holds
            found.append(Phase(f"all-gather of block {i}", accumulated, held[i], shared + hidden + gathered.gather[i]))
        found.append(Phase(f"forward of block {i}", accumulated, held[i], shared + c.fwd_peak + gathered.forward[i]))
    # what the blocks are handed but kept blocks do not save, a recomputing block holds until its backward
    holding = list(accumulate((c is not Choice.KEEP for c in choices), operator.or_))  # any of blocks 0..i recomputes
    unkept = [head.unkept_shared if h else 0 for h in holding]
    # the blocks' input, once: where the head holds it and the first block saves it too
    twice = min(head.holds_input, cost[0].saved_input) if cost else 0
    found.append(
        Phase(
            "loss forward", accumulated, held[-1] - twice, head.fwd_peak + (head.unkept_loss if holding[-1] else 0) + gathered.loss_forward
        )
    )
    found.append(Phase("loss backward", accumulated, total_saved - twice, head.bwd_peak + unkept[-1] + gathered.loss_backward))
    for i in reversed(range(len(cost))):
        grads = max(accumulated, (len(cost) - 1 - i) * block_grad)
        # the gradient the blocks accumulate for a shared input: from the second block's backward on
        # (the first's is part of its own backward's bytes)
        shared_grad = head.shared_grad if i < len(cost) - 1 else 0
        found.append(
            Phase(
                f"backward of block {i}",
                grads,
                before[i] - (twice if i else 0),
                head.after_bwd
                + shared_grad
                + unkept[i]
                + cost[i].bwd_peak
                - (0 if i else twice)
                + gathered.backward[i]
                + (streaming if i < len(cost) - 1 else 0),
            )
        )
        if gathered.reduce_scatter[i] and not accumulated:
            found.append(
                Phase(
                    f"reduce-scatter of block {i}",
                    grads,
                    before[i] - (twice if i else 0),
                    head.after_bwd + shared_grad + unkept[i] + gathered.reduce_scatter[i],
                )
            )
    found.append(
        Phase(
            "embedding backward",
            max(accumulated, len(cost) * block_grad),
            0,
            head.embed_bwd_peak + gathered.embedding_backward + (streaming if cost else 0),
        )
    )
    if gathered.rest_reduce_scatter and not accumulated:
        found.append(Phase("reduce-scatter of the rest", len(cost) * block_grad, 0, gathered.rest_reduce_scatter))
    found.append(Phase("optimizer step", all_grads, 0, step_transient))
    return found


def _accumulated(whole: int, kept: int, layout: Layout, accum: int) -> int:
    """Gradients live through a micro-batch after the first of ``accum``: FSDP2 skips the
    reduce-scatter of every micro-batch but the last (no-sync), so they accumulate whole;
    the other layouts accumulate what they keep."""
    if accum < 2 or layout.where("grads") is Where.HOST:
        return 0
    return whole if layout.shard == "fsdp2" and layout.world_size > 1 else kept


def breakdown(
    profile: Profile,
    choices: Sequence[Choice],
    *,
    world_size: int = 1,
    overheads: Overheads = Overheads(),
    layout: Layout | None = None,
    accum: int = 1,
) -> Breakdown:
    """Predicted peak of one step (after the first, once optimizer state exists) on one rank:
    the largest of its ``phases`` over the static state.

    ``layout``: the sharding and the kinds of state on the host (default: FSDP2 over
    ``world_size`` ranks, nothing on the host); ``accum``: micro-batches per optimizer step
    (after the first, every micro-batch runs with the gradients accumulated so far)."""
    layout = layout or layout_for(None, world_size)
    weights, optimizer = static_bytes(profile, layout)
    static = weights + optimizer + profile.buffer_bytes
    peak = max(phases(profile, choices, layout=layout, accum=accum), key=lambda p: p.total)
    name, grads, live_saved, transient = peak.name, peak.grads, peak.saved, peak.transient

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


def peak_bytes(
    profile: Profile,
    choices: Sequence[Choice],
    *,
    world_size: int = 1,
    overheads: Overheads = Overheads(),
    layout: Layout | None = None,
    accum: int = 1,
) -> int:
    return breakdown(profile, choices, world_size=world_size, overheads=overheads, layout=layout, accum=accum).reserved_peak


def with_measured_memory(profile: Profile, blocks: dict[Choice, BlockCost]) -> Profile:
    """The profile with each choice's bytes (saved, held, forward and backward peaks) from
    a real block (realblock.measure_real); recompute costs unchanged."""
    options = {
        c: replace(
            o,
            saved=blocks[c].saved,
            held=blocks[c].held,
            fwd_peak=blocks[c].fwd_peak,
            bwd_peak=blocks[c].bwd_peak,
            saved_input=blocks[c].saved_input,
        )
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

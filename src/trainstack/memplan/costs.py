"""Plan types: what calibration measures (costs, profiles), what the planner chooses. Pure data, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Choice(str, Enum):
    """What a block keeps from its forward pass until its backward pass."""

    KEEP = "keep"  # every tensor autograd saves
    SELECTIVE = "selective"  # matmul and attention outputs; cheap ops are recomputed
    FULL = "full"  # only the block's input; the whole block is recomputed

    def __str__(self) -> str:
        return self.value


# The order of the counts (full, selective, keep); a plan's recomputed-first layout puts the
# blocks in this order, so the block whose backward runs first (the last one) needs no recompute.
CHOICE_ORDER = (Choice.FULL, Choice.SELECTIVE, Choice.KEEP)


@dataclass(frozen=True)
class BlockCost:
    """One block under one choice, measured at one (batch, seq).

    ``saved``: bytes held from the block's forward to its backward, its input included.
    ``held``: bytes held while the forward pass goes on (autocast keeps its bf16 weight
    copies until the autocast region ends, also for recomputed blocks).
    ``fwd_peak``: the most bytes live during its forward above what was live before, input included.
    ``bwd_peak``: the most bytes live during its backward, its saved bytes and the output it
    saves among them, recomputed activations, intermediate gradients and weight gradients;
    not the gradient handed to it (the head's ``after_bwd`` counts that one).
    ``recompute_flops`` and ``recompute_seconds``: the forward work done again in backward,
    and its GPU time by roofline. ``host_seconds``: what the choice adds to the host's time
    to issue the step (the op dispatches of recompute, and selective's per-op policy).
    """

    saved: int
    held: int  # bytes held until the end of the forward pass: saved plus autocast's weight copies
    fwd_peak: int
    bwd_peak: int
    recompute_flops: float = 0.0
    recompute_seconds: float = 0.0
    host_seconds: float = 0.0
    # of ``saved``, the block's own input where the block saves it (the first block's input
    # is the model's tensor from before the blocks, which the head may hold too)
    saved_input: int = 0


@dataclass(frozen=True)
class HeadCost:
    """Everything outside the blocks (embedding, final norm, loss), measured with no blocks.

    ``fwd_peak``: most bytes live during its forward. ``bwd_peak``: most bytes live during the
    backward of norm and loss. ``after_bwd``: bytes live when the gradient reaches the blocks
    (the gradients of the output layer, the hidden-state gradient). ``embed_bwd_peak``: most
    bytes live during the embedding's backward.
    """

    fwd_peak: int
    bwd_peak: int
    after_bwd: int
    embed_bwd_peak: int
    # bytes made before the blocks and passed to each (masks, position embeddings): the
    # blocks keep them alive through their forward and backward
    shared: int = 0
    # the gradient those of them that need one accumulate through the blocks' backward
    # (an encoder's output handed to every decoder block, a position bias with parameters)
    shared_grad: int = 0
    # of ``shared``, what kept blocks do not save themselves (a mask they save only casts
    # of) and nothing else holds by the time the gradient reaches the blocks: not in the
    # backward's bytes above, alive there only while a block that recomputes (and so holds
    # its inputs) is still to go back through; ``unkept_loss``: the same by the time the
    # loss is computed (an encoder's output the model returns is not among them)
    unkept_shared: int = 0
    unkept_loss: int = 0
    # the blocks' input where the head itself keeps it through the blocks' backward (the
    # module before them saves its output: a stage's first block, a ReLU): not to be counted
    # again where the first block saves it too
    holds_input: int = 0


@dataclass(frozen=True)
class Profile:
    """The calibration of one model at one (batch, seq): what the memory model composes."""

    n_blocks: int
    block_param_bytes: int  # one block's parameters, as stored (fp32 master weights)
    other_param_bytes: int  # parameters outside the blocks
    buffer_bytes: int  # buffers (rotary tables): no gradient, no optimizer state
    options: dict[Choice, BlockCost]
    head: HeadCost
    step_flops: float  # forward + backward of the whole model, no recompute
    step_seconds: float  # roofline estimate of the same work on the GPU
    step_host_seconds: float  # the host's time to issue it (per-op dispatch)
    head_seconds: float = 0.0  # roofline estimate of embedding, norm and loss
    largest_allocation: int = 0  # the step's largest single tensor (the loss chunk's fp32 logits)
    batch: int = 0
    seq: int = 0
    optimizer_states: int = 2  # AdamW keeps two fp32 tensors per parameter
    label: str = ""
    # Where they are given (calibration of any model): gradient and optimizer-state bytes
    # (master weights included) of one block and of the rest, which depend on the optimizer,
    # the precision and which parameters train; None: as the weights, times optimizer_states.
    block_grad_bytes: int | None = None
    other_grad_bytes: int | None = None
    block_state_bytes: int | None = None
    other_state_bytes: int | None = None
    step_scratch: int = 0  # what the optimizer step allocates and frees (foreach temporaries)
    # the largest trainable parameter: its elements and its bytes as stored (an offloaded
    # optimizer streams state in chunks of at most it, placement.CHUNK_BYTES)
    largest_param_elements: int = 0
    largest_param_bytes: int = 0
    # of the optimizer-state bytes, the fp32 master weights kept beside bf16 parameters
    block_master_bytes: int = 0
    other_master_bytes: int = 0
    blocks: str | None = None  # dotted name of the module list holding the blocks (None: the model's ``layers``)
    first_block: int = 0  # the first planned block in that list
    optimizer: str = "AdamW"
    precision: str = "bf16 autocast, fp32 weights"

    def grad_bytes(self) -> tuple[int, int]:
        """Gradient bytes of one block and of the rest."""
        if self.block_grad_bytes is None:
            return self.block_param_bytes, self.other_param_bytes
        return self.block_grad_bytes, self.other_grad_bytes or 0

    def state_bytes(self) -> tuple[int, int]:
        """Optimizer-state bytes of one block and of the rest."""
        if self.block_state_bytes is None:
            return self.optimizer_states * self.block_param_bytes, self.optimizer_states * self.other_param_bytes
        return self.block_state_bytes, self.other_state_bytes or 0


@dataclass(frozen=True)
class Overheads:
    """What fake-tensor calibration cannot see, measured on a GPU (benchmarks/memplan_h200.py).

    ``workspace``: bytes the GPU libraries take through the caching allocator (cuBLAS
    workspaces). The allocator's room above the allocated peak is the larger of
    ``fragmentation`` (a fraction of the allocated peak) and ``largest_room`` (a fraction of
    the step's largest single allocation).
    """

    workspace: int = 0
    fragmentation: float = 0.0
    largest_room: float = 0.0


@dataclass(frozen=True)
class Breakdown:
    """The predicted peak and what it is made of, in bytes."""

    weights: int
    grads: int  # gradients live at the peak
    optimizer: int
    saved_activations: int  # all blocks' saved bytes live at the peak
    saved_per_block: dict[Choice, int]
    transient: int  # what the peak phase adds on top
    transient_phase: str  # which phase sets the peak
    transients: dict[str, int]  # the largest transient of each kind, whether it sets the peak or not
    workspace: int
    allocated_peak: int  # predicted torch.cuda.max_memory_allocated
    allocator_overhead: int
    reserved_peak: int  # predicted torch.cuda.max_memory_reserved: what must fit the budget
    host_bytes: int = 0  # what one rank keeps in the host's memory (offloaded state, staging chunks)
    # per kind of state (params, grads, master, optimizer): where it lives and one rank's bytes there
    per_kind: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    choices: tuple[Choice, ...]  # one per block, in model order
    breakdown: Breakdown
    budget_bytes: int
    world_size: int
    recompute_flops_fraction: float  # recompute FLOPs over the step's FLOPs
    recompute_time_fraction: float  # roofline estimate of the recompute time over the step's
    profile: Profile = field(repr=False, compare=False)
    # For compiled blocks: torch.compile's activation memory budget for the kept blocks (the
    # partitioner recomputes cheap ops inside them down to this fraction); None: not chosen.
    compiler_budget: float | None = None
    layout: Any = None  # placement.Layout: the sharding and what lives on the host (None: as world_size implies)
    accum: int = 1  # micro-batches per optimizer step
    step_cost: Any = None  # offload.StepCost: the step's estimated time, copies and CPU step included
    why: str = ""  # why this plan: what did not fit, what was faster

    @property
    def blocks(self) -> str | None:
        """Dotted name of the module list whose blocks ``choices`` are for (None: ``model.layers``)."""
        return self.profile.blocks

    @property
    def first_block(self) -> int:
        return self.profile.first_block

    @property
    def peak_bytes(self) -> int:
        return self.breakdown.reserved_peak

    @property
    def counts(self) -> dict[Choice, int]:
        return {c: self.choices.count(c) for c in CHOICE_ORDER}

    def summary(self) -> str:
        n = self.counts
        text = f"{n[Choice.KEEP]} keep, {n[Choice.SELECTIVE]} selective, {n[Choice.FULL]} full"
        if self.compiler_budget is not None and self.compiler_budget < 1 and n[Choice.KEEP]:
            text += f" (kept blocks compiled under activation memory budget {self.compiler_budget:g})"
        return text

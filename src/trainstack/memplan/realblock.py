"""Real blocks: one copy of any model's first block per choice, its bytes from the CUDA
allocator and its time, where fake tensors cannot see the device's kernels (which attention
kernel runs, what it saves, how fast). The one real-block measurer: the bench decoder's
blocks are measured here too, on a one-block copy of the decoder (``decoder``)."""

from __future__ import annotations

import copy
import statistics
import time
import warnings
from typing import Any

from trainstack.memplan.block_call import hidden_of, record_call
from trainstack.memplan.blocks import BlockRun
from trainstack.memplan.calibration import backward_from
from trainstack.memplan.costs import BlockCost, Choice
from trainstack.memplan.model_step import autocast_for, no_kv_cache
from trainstack.memplan.optim import PrecisionSpec
from trainstack.memplan.wrappers import compile_block, library_checkpointing_off, wrap


def measure_real(
    model: Any,
    batch: Any,
    *,
    run: BlockRun,
    precision: PrecisionSpec,
    timed: bool = True,
    steps: int = 7,
    reps: int = 3,
    compiled: bool = False,
    keep_budgets: tuple[float, ...] = (),
) -> tuple[dict[Any, BlockCost] | None, dict[Any, float] | None]:
    """One real copy of the first block per choice, on the model's device: on a CUDA
    device its bytes from the allocator (else no bytes: None) and, when ``timed``, the time of its
    forward and backward: the median over ``steps`` rounds of a round robin, each sample
    ``reps`` forward-and-backward passes back to back with one synchronisation (as a
    training step issues them: the host runs ahead of the device, and one pass timed
    alone would add the host's launch latency and the sync to every block).
    ``compiled``: each copy under torch.compile, as a compiled run uses it, and a kept copy
    compiled under each of ``keep_budgets`` (the compiler's activation memory budget), keyed
    by the budget. A budget the compiler fails to partition under is left out, with a
    warning saying why. Returns (bytes per choice or None, seconds per choice or None)."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    container = model.get_submodule(run.path)
    original = container[run.first]
    device = next(original.parameters()).device
    with no_kv_cache(model):  # with gradients: the call says which inputs need one
        call = record_call(model, original, batch, label=f"{run.path}[{run.first}]", context=autocast_for(device, precision))
    call = call.with_grad_inputs()

    def plain_copy() -> Any:
        block = copy.deepcopy(original).train()
        library_checkpointing_off(block)
        return block

    blocks: dict[Any, Any] = {c: wrap(plain_copy(), c) for c in (Choice.KEEP, Choice.SELECTIVE, Choice.FULL)}
    if compiled:
        blocks = {c: compile_block(b) for c, b in blocks.items()}
        blocks |= {budget: compile_block(plain_copy(), budget) for budget in keep_budgets}
    x0 = call.x
    on_cuda = device.type == "cuda"
    allocated, peak = torch.cuda.memory_allocated, torch.cuda.max_memory_allocated

    def sync() -> None:
        if on_cuda:
            torch.cuda.synchronize(device)

    def once(block: Any) -> BlockCost:
        # the input is a copy of a leaf, as the last block's output is (calibration.measure_block
        # says why); the leaf stands for what came before the block and is not counted
        leaf = torch.randn(x0.shape, dtype=x0.dtype, device=device, requires_grad=True)
        torch.cuda.synchronize(device)
        base = allocated(device)
        x = leaf.clone()
        torch.cuda.reset_peak_memory_stats(device)
        args, kwargs = call.with_x(x)
        x_ref, x_bytes = StorageWeakRef(x.untyped_storage()), x.untyped_storage().nbytes()
        del x
        with autocast_for(device, precision):
            out = block(*args, **kwargs)
            y = hidden_of(out)
            del out, args, kwargs
            y_bytes = y.untyped_storage().nbytes()
            # what the block leaves behind while the forward goes on (calibration.measure_block)
            held = allocated(device) - base - y_bytes
        saved = allocated(device) - base - y_bytes
        saved_input = 0 if x_ref.expired() else x_bytes  # the block saves its input
        fwd_peak = peak(device) - base
        y = backward_from(y)  # as calibration.measure_block: the gradient made and freed by autograd
        torch.cuda.reset_peak_memory_stats(device)
        y.backward()
        bwd_peak = peak(device) - base - y_bytes  # the gradient reaching the block: the head's
        block.zero_grad(set_to_none=True)
        return BlockCost(saved=saved, held=held, fwd_peak=fwd_peak, bwd_peak=bwd_peak, saved_input=saved_input)

    def seconds(block: Any) -> float:
        leaf = torch.randn(x0.shape, dtype=x0.dtype, device=device, requires_grad=True)
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            args, kwargs = call.with_x(leaf.clone())
            with autocast_for(device, precision):
                y = hidden_of(block(*args, **kwargs))
            y.backward(torch.ones_like(y))
            del y, args, kwargs
            # each pass writes fresh gradients, as a step's first backward does
            block.zero_grad(set_to_none=True)
            leaf.grad = None
        sync()
        return (time.perf_counter() - start) / reps

    try:
        memory: dict[Any, BlockCost] = {}
        for choice, block in list(blocks.items()):
            try:
                # the first pass compiles a compiled copy; without the CUDA allocator it is the warm-up
                once(block) if on_cuda else seconds(block)
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:  # a budget the compiler cannot partition under is left out, not the plan
                if not isinstance(choice, float):
                    raise
                del blocks[choice]
                reason = (str(exc).strip().splitlines() or [""])[-1]
                warnings.warn(
                    f"memplan: compiler activation memory budget {choice:g} left out of the plan (the compile failed: {type(exc).__name__}: {reason})",
                    stacklevel=2,
                )
                continue
            if on_cuda:
                memory[choice] = once(block)
        times = None
        if timed:
            for block in tuple(blocks.values()) * 2:
                seconds(block)
            samples: dict[Any, list[float]] = {c: [] for c in blocks}
            for _ in range(steps):
                for choice, block in blocks.items():
                    samples[choice].append(seconds(block))
            times = {c: statistics.median(s) for c, s in samples.items()}
    finally:
        blocks.clear()
        if on_cuda:
            torch.cuda.empty_cache()
    return (memory if on_cuda else None), times

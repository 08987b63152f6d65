"""Calibration of any model: its blocks and the rest of it measured on fake tensors.

On a copy of the model whose parameters are fake tensors of the target device (``fake``):

1. the model runs until its first block (``blocks``) is called, which records that call
   (``block_call``);
2. that block, wrapped for keep, selective and full recompute, runs forward and backward
   on a fresh hidden input with the recorded rest (``measure_block``);
3. the blocks are replaced by pass-throughs that hand their input on and keep what the
   model passed them alive, as real blocks do (each keeps its block's attributes and
   buffers, which the model's own loop may read), and one step of the rest of the model
   (embedding, final norm, head, loss) gives the head's phases.

Parameter, gradient and optimizer-state bytes come from the parameters' shapes, dtypes
and ``requires_grad`` with the optimizer and precision of ``memplan.optim``. On a CUDA
GPU ``realblock.measure_real`` replaces the blocks' bytes and recompute times by one real copy of
the block per choice, measured by the allocator and timed.

A model that cannot be calibrated raises ``UnplannableModel`` with the reason in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from trainstack.memplan.block_call import BlockCall, hidden_of, record_call
from trainstack.memplan.blocks import BlockRun, UnplannableModel
from trainstack.memplan.costs import BlockCost, Choice, HeadCost, Profile
from trainstack.memplan.fake import as_eager, fake_as_real, fake_copy, fake_failure, fake_like, first_line, unique_tensors
from trainstack.memplan.model_step import LossFn, autocast_for, batch_shape, call_model, default_loss
from trainstack.memplan.optim import OptimizerSpec, PrecisionSpec
from trainstack.memplan.tracking import OpCost, Roofline, tracker
from trainstack.memplan.wrappers import library_checkpointing_off, wrap


def calibrate_model(
    model: Any,
    batch: Any,
    *,
    run: BlockRun,
    optimizer: OptimizerSpec,
    precision: PrecisionSpec,
    device: Any,
    loss_fn: LossFn = default_loss,
    roofline: Roofline = Roofline(),
    label: str = "",
) -> Profile:
    """The Profile of ``model`` training on ``batch``, from fake tensors on ``device``:
    on the libraries' eager path (``fake.TRACING_CHECKS``), else, where that needs the data, on
    their tracing path."""
    kwargs = dict(run=run, optimizer=optimizer, precision=precision, device=device, loss_fn=loss_fn, roofline=roofline, label=label)
    try:
        return _calibrate(model, batch, eager=True, **kwargs)
    except UnplannableModel as exc:
        if "data-dependent" not in str(exc):
            raise
    return _calibrate(model, batch, eager=False, **kwargs)


def _calibrate(
    model: Any,
    batch: Any,
    *,
    run: BlockRun,
    optimizer: OptimizerSpec,
    precision: PrecisionSpec,
    device: Any,
    loss_fn: LossFn,
    roofline: Roofline,
    label: str,
    eager: bool,
) -> Profile:
    from torch._subclasses.fake_tensor import FakeTensorMode

    rows, seq = batch_shape(batch)
    where = f"{run.path}[{run.first}]"
    try:
        with FakeTensorMode(), fake_as_real(), as_eager(eager):
            fake = fake_copy(model, device, precision)
            container = fake.get_submodule(run.path)
            for i in range(run.first, run.first + run.count):
                # measured as they compute without it: the plan, once applied, decides what they recompute
                library_checkpointing_off(container[i])
            block = container[run.first]
            call = record_call(fake, block, fake_like(batch, device), label=where, context=autocast_for(device, precision))
            options: dict[Choice, BlockCost] = {}
            costs: dict[Choice, tuple[OpCost, OpCost]] = {}
            for choice in (Choice.KEEP, Choice.SELECTIVE, Choice.FULL):
                options[choice], *pair = measure_block(block, choice, call, device, precision, roofline)
                costs[choice] = (pair[0], pair[1])
            kept_inputs = saved_inputs(block, call, device, precision)
            head, head_cost = _measure_head(fake, run, call, batch, loss_fn, device, precision, roofline, kept_inputs)
    except UnplannableModel:
        raise
    except Exception as exc:  # noqa: BLE001 - a model that fake tensors cannot run gets its one-line reason
        reason = fake_failure(exc, model)
        if reason is None:
            raise UnplannableModel(
                f"{type(model).__name__} failed under calibration at {where} or around it ({type(exc).__name__}: {first_line(exc)})"
            ) from None
        raise UnplannableModel(f"{type(model).__name__}: {reason}") from None
    keep_fwd, keep_bwd = costs[Choice.KEEP]
    largest = max([c.largest for pair in costs.values() for c in pair] + [head_cost.largest])
    options[Choice.FULL] = replace(
        options[Choice.FULL],
        recompute_flops=keep_fwd.flops,
        recompute_seconds=keep_fwd.seconds,
        host_seconds=keep_fwd.ops * roofline.full_op_s,
    )
    options[Choice.SELECTIVE] = replace(
        options[Choice.SELECTIVE],
        recompute_flops=keep_fwd.flops - keep_fwd.saved_flops,
        recompute_seconds=keep_fwd.seconds - keep_fwd.saved_seconds,
        host_seconds=keep_fwd.ops * roofline.selective_op_s,
    )
    container = model.get_submodule(run.path)
    block_params = _param_bytes(list(container[run.first].parameters()), optimizer, precision)
    total = _param_bytes(unique_tensors(model.parameters()), optimizer, precision)
    others = [
        total.params - run.count * block_params.params,
        total.grads - run.count * block_params.grads,
        total.states - run.count * block_params.states,
    ]
    if min(others) < 0:
        raise UnplannableModel(
            f"the blocks at {run.path} share parameters with each other; memplan plans blocks with parameters of their own"
        )
    n = run.count
    largest_trained = _largest_trained(unique_tensors(model.parameters()), precision)
    return Profile(
        n_blocks=n,
        block_param_bytes=block_params.params,
        other_param_bytes=others[0],
        buffer_bytes=sum(b.numel() * b.element_size() for b in unique_tensors(model.buffers())),
        options=options,
        head=head,
        step_flops=n * (keep_fwd.flops + keep_bwd.flops) + head_cost.flops,
        step_seconds=n * (keep_fwd.seconds + keep_bwd.seconds) + head_cost.seconds,
        step_host_seconds=(n * (keep_fwd.ops + keep_bwd.ops) + head_cost.ops) * roofline.host_op_s,
        head_seconds=head_cost.seconds,
        largest_allocation=largest,
        batch=rows,
        seq=seq,
        label=label,
        block_grad_bytes=block_params.grads,
        other_grad_bytes=others[1],
        block_state_bytes=block_params.states,
        other_state_bytes=others[2],
        block_master_bytes=block_params.master,
        other_master_bytes=total.master - n * block_params.master,
        step_scratch=int(optimizer.step_scratch * total.grads)
        + optimizer.largest_scratch * _largest_state_tensor(unique_tensors(model.parameters()), precision),
        largest_param_elements=largest_trained[0],
        largest_param_bytes=largest_trained[1],
        blocks=run.path,
        first_block=run.first,
        optimizer=optimizer.name,
        precision=precision.name,
    )


def measure_block(
    block: Any, choice: Choice, call: BlockCall, device: Any, precision: PrecisionSpec, roofline: Roofline
) -> tuple[BlockCost, OpCost, OpCost]:
    """Forward and backward of one block wrapped for ``choice``, called as ``call`` records
    with a fresh hidden input, on fake tensors under the live-bytes tracker: its saved,
    held and peak bytes (``BlockCost``), and the op costs of its forward and backward."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    wrapped = wrap(block, choice)
    for p in block.parameters():
        p.grad = None
    mode = tracker(roofline)
    x0 = call.x
    call = call.with_grad_inputs()
    with mode:
        # the block's input is the last block's output: a copy of a leaf, which nothing
        # but the block's saved state keeps once the forward is over (a post-norm block,
        # whose first ops save casts of its input, does not keep the input itself)
        leaf = torch.randn(x0.shape, dtype=x0.dtype, device=device, requires_grad=True)
        x = leaf.clone()
        x_bytes = x.untyped_storage().nbytes()  # the leaf's too
        mode.reset_peak()
        mode.reset_cost()
        start = mode.live - x_bytes
        args, kwargs = call.with_x(x)
        x_ref = StorageWeakRef(x.untyped_storage())  # alive after the forward where the block saves it
        del x
        with autocast_for(device, precision):
            out = wrapped(*args, **kwargs)
            y = hidden_of(out)
            y_bytes = y.untyped_storage().nbytes()
            del out, args, kwargs
            # what the block leaves behind while the forward goes on: its saved state, and
            # autocast's casts of its weights, cached until the forward's autocast ends
            held = mode.live - y_bytes - x_bytes
        fwd_cost = mode.state.cost
        fwd_peak = mode.state.peak - start
        saved = mode.live - y_bytes - x_bytes
        saved_input = 0 if x_ref.expired() else x_bytes
        # the backward as a step runs it: the gradient reaching the block is made by autograd
        # and freed once its first op has used it, and the output lives on only where the
        # block saved it (a last ReLU saves its result; a residual add saves nothing)
        y = backward_from(y)
        mode.reset_peak()
        mode.reset_cost()
        y.backward()
        # the gradient reaching the block is counted with the head's bytes (HeadCost.after_bwd)
        bwd_peak = mode.state.peak - x_bytes - y_bytes
        bwd_cost = mode.state.cost
    wrap(block, Choice.KEEP)
    for p in block.parameters():
        p.grad = None
    return BlockCost(saved=saved, held=held, fwd_peak=fwd_peak, bwd_peak=bwd_peak, saved_input=saved_input), fwd_cost, bwd_cost


def backward_from(y: Any) -> Any:
    """A scalar whose backward hands ``y`` a gradient of its shape that autograd makes and
    frees, as a step's backward does, with no reference to ``y`` or to the gradient kept
    here (the caller's ``y`` is the one reference, and it is handed over)."""
    import torch

    with torch.no_grad():
        weights = torch.randn_like(y)
    return (y * weights).sum()


def saved_inputs(block: Any, call: BlockCall, device: Any, precision: PrecisionSpec) -> frozenset[int]:
    """Which of the tensors the model hands a kept block besides its hidden input (positions
    in tree_flatten((args, kwargs))) the block saves for backward itself, not a copy: a mask
    or a position embedding a product saves, but not an encoder's output a block saves only
    casts of, which nothing then keeps through the backward unless a block recomputes."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._pytree import tree_flatten

    call = call.with_grad_inputs()
    x = call.fresh_x(device)
    args, kwargs = call.with_x(x)
    positions: dict[int, list[int]] = {}
    for i, t in enumerate(tree_flatten((args, kwargs))[0]):
        if isinstance(t, torch.Tensor) and t is not x:
            positions.setdefault(StorageWeakRef(t.untyped_storage()).cdata, []).append(i)
    saved: set[int] = set()

    def pack(t: Any) -> Any:
        saved.update(positions.get(StorageWeakRef(t.untyped_storage()).cdata, ()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast_for(device, precision):
        block(*args, **kwargs)
    return frozenset(saved)


def _measure_head(
    model: Any,
    run: BlockRun,
    call: BlockCall,
    batch: Any,
    loss_fn: LossFn,
    device: Any,
    precision: PrecisionSpec,
    roofline: Roofline,
    kept_inputs: frozenset[int],
) -> tuple[HeadCost, OpCost]:
    """One step of the model with its blocks passed through: embedding, final norm, head,
    loss. The stand-ins keep what kept blocks save of their other inputs (``kept_inputs``)."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._pytree import tree_flatten

    mode = tracker(roofline)
    marks: dict[str, int] = {}
    kept: list[Any] = []
    calls: list[int] = [0]  # the stand-ins called so far
    blocks_input: list[Any] = []  # the first one's input: a weak reference to its storage, and its bytes

    def at_blocks(grad: Any) -> None:
        marks["bwd_peak"] = mode.state.peak
        marks["after_bwd"] = mode.live_with(grad)
        ref, nbytes = blocks_input[0]
        marks["holds_input"] = 0 if ref.expired() else nbytes
        # what the blocks are handed, kept blocks do not save and the head's step has freed by
        # now (mode.state.watched): a block that recomputes would still hold it
        marks["unkept_shared"] = mode.watched_gone()
        mode.reset_peak()

    def on_input(hidden: Any, args: tuple, kwargs: dict) -> Any:
        calls[0] += 1
        # only the first stand-in marks: the blocks that follow are handed the same tensors
        # (no others at all, for an encoder called without a mask)
        out = first(hidden, args, kwargs) if calls[0] == 1 else hidden
        # the last block's output is a tensor of its own: what the head keeps of the blocks'
        # input (a module before them that saves its output) and of their output (a norm or
        # a pooling after them that saves its input) are two tensors, as in the model
        return out.clone() if calls[0] == run.count else out

    def first(hidden: Any, args: tuple, kwargs: dict) -> Any:
        blocks_input.append((StorageWeakRef(hidden.untyped_storage()), hidden.untyped_storage().nbytes()))
        flat = tree_flatten((args, kwargs))[0]
        others = [t for t in flat if isinstance(t, torch.Tensor) and t is not hidden]
        # what kept blocks save of the others stays alive through the backward, as in the model
        kept.extend(t for i, t in enumerate(flat) if i in kept_inputs and t is not hidden)
        hidden_id = StorageWeakRef(hidden.untyped_storage()).cdata
        storages = {StorageWeakRef(t.untyped_storage()).cdata for t in others} - {hidden_id}
        held = {StorageWeakRef(t.untyped_storage()).cdata for t in kept}
        marks["shared"] = mode.bytes_of(storages)
        mode.watch(storages - held)
        marks["shared_grad"] = sum(t.numel() * t.element_size() for t in others if t.requires_grad)
        out = _joined(hidden, [t for t in others if t.requires_grad])
        if out.requires_grad:
            out.register_hook(at_blocks)
        return out

    # the first stand-in keeps what a kept block saves of what the model passed it, hands a
    # gradient to what needs one, and marks when the gradient reaches the blocks
    container = model.get_submodule(run.path)
    for i in range(run.first, run.first + run.count):
        container[i] = _pass_through(container[i], call, on_input)
    try:
        with mode:
            fake_batch = fake_like(batch, device)
            with autocast_for(device, precision):
                loss = loss_fn(call_model(model, fake_batch), fake_batch)
            fwd_peak = mode.state.peak
            marks["unkept_loss"] = mode.state.watched_gone_at_peak
            mode.reset_peak()
            loss.backward()
            embed_bwd_peak = mode.state.peak
            after = mode.live
            cost = mode.state.cost
    finally:
        kept.clear()
        for p in model.parameters():
            p.grad = None
    if "after_bwd" not in marks:  # the blocks' input needs no gradient (frozen embedding)
        marks.update(bwd_peak=embed_bwd_peak, after_bwd=after)
    head = HeadCost(
        fwd_peak=fwd_peak,
        bwd_peak=marks["bwd_peak"],
        after_bwd=marks["after_bwd"],
        embed_bwd_peak=embed_bwd_peak,
        shared=marks.get("shared", 0),
        shared_grad=marks.get("shared_grad", 0),
        unkept_shared=marks.get("unkept_shared", marks["unkept_loss"]),
        unkept_loss=marks["unkept_loss"],
        holds_input=marks.get("holds_input", 0),
    )
    return head, cost


def _pass_through(block: Any, call: BlockCall, on_input: Callable[[Any, tuple, dict], Any]) -> Any:
    """A module that stands for ``block`` in the head's step: hands on, in the block's output
    structure, what ``on_input(hidden, args, kwargs)`` returns for its hidden input.

    It is the block itself in all but its forward: an instance of a subclass of the block's
    class sharing the block's attributes, buffers and submodules, so that whatever the
    model's own loop reads of its layers (a layer's ``attention_type`` choosing its mask, a
    sliding window, a layer index) reads the same, whichever library version wrote the loop,
    and ``isinstance`` checks still hold. The parameters it shares were made before the
    step's tracker, which counts none of them."""
    cls: Any = type(block)

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        hidden = args[call.hidden] if isinstance(call.hidden, int) else kwargs[call.hidden]
        return call.output_like(on_input(hidden, args, kwargs))

    stand_in_class = type(f"PassThrough{cls.__name__}", (cls,), {"forward": forward, "__module__": __name__})
    stand_in = cls.__new__(stand_in_class)
    stand_in.__dict__.update(vars(block))
    # hooks of its own (a library's output recorder, a profiler's) belong to the real block
    for name, value in vars(block).items():
        if name.startswith("_") and name.endswith("hooks") and isinstance(value, dict):
            stand_in.__dict__[name] = type(value)()
    return stand_in


def _joined(hidden: Any, others: list[Any]) -> Any:
    """``hidden`` handed on (a view) with a gradient for ``others`` when the backward passes:
    zeros of their shapes, as the blocks' backward accumulates for them. What computed them
    (an encoder) then runs its backward in the head's step, as it does in the model's, and
    its graph stays alive without the tensors themselves, which no kept block holds."""
    import torch

    class Join(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, h: Any, *rest: Any) -> Any:
            ctx.like = [(t.shape, t.dtype, t.device) for t in rest]
            return h.view_as(h)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return (grad, *(torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.like))

    return Join.apply(hidden, *others) if others else hidden


# -- the parameters' bytes: from their shapes, dtypes and requires_grad, with the optimizer and precision


@dataclass(frozen=True)
class _Bytes:
    params: int
    grads: int
    states: int
    master: int = 0


def _param_bytes(params: list[Any], optimizer: OptimizerSpec, precision: PrecisionSpec) -> _Bytes:
    stored = grads = states = master = 0
    for p in params:
        itemsize = precision.param_itemsize if precision.param_itemsize and p.is_floating_point() else p.element_size()
        nbytes = p.numel() * itemsize
        stored += nbytes
        if p.requires_grad:
            grads += nbytes
            state_itemsize = precision.state_itemsize or itemsize
            states += optimizer.state_bytes(tuple(p.shape), state_itemsize) + p.numel() * precision.master_itemsize
            master += p.numel() * precision.master_itemsize
    return _Bytes(stored, grads, states, master)


def _largest_trained(params: list[Any], precision: PrecisionSpec) -> tuple[int, int]:
    """(elements, bytes as stored) of the largest trainable floating parameter."""
    numel = max((p.numel() for p in params if p.requires_grad and p.is_floating_point()), default=0)
    itemsize = next(
        (precision.param_itemsize or p.element_size() for p in params if p.requires_grad and p.is_floating_point() and p.numel() == numel),
        0,
    )
    return numel, numel * itemsize


def _largest_state_tensor(params: list[Any], precision: PrecisionSpec) -> int:
    """Bytes of the largest trainable parameter in the optimizer state's dtype."""
    sizes = [
        p.numel() * (precision.state_itemsize or precision.param_itemsize or p.element_size())
        for p in params
        if p.requires_grad and p.is_floating_point()
    ]
    return max(sizes, default=0)

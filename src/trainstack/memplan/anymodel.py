"""Calibration of any model: its repeated blocks found and measured on fake tensors.

The blocks are the longest run of identical modules (same class, same parameter and
buffer shapes) in a ``ModuleList`` or ``Sequential``: the decoder or encoder layers of a
Hugging Face model, a stage of a vision model, or a list the user names. Nothing here
knows an architecture; what differs between models is found by running them.

On a copy of the model whose parameters are fake tensors of the target device:

1. the model runs until its first block is called, which records that call (the hidden
   input, and whatever else the model passes: masks, position embeddings) and its output;
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

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from trainstack.errors import SpecError
from trainstack.memplan.costs import BlockCost, Choice, HeadCost, Profile
from trainstack.memplan.optim import OptimizerSpec, PrecisionSpec
from trainstack.memplan.tracking import OpCost, Roofline, dispatch_mode_base, tracker
from trainstack.memplan.wrappers import cache_configs, library_checkpointing_off, wrap

LossFn = Callable[[Any, Any], Any]
HIDDEN_NAMES = ("hidden_states", "hidden_state", "x", "input", "inputs", "hidden")


class UnplannableModel(SpecError):
    """A model memplan cannot plan: the reason names what is missing."""


@dataclass(frozen=True)
class BlockRun:
    """The planned blocks: ``count`` identical modules from ``first`` in the list at ``path``."""

    path: str
    first: int
    count: int
    kind: str


def _signature(module: Any) -> tuple:
    params = tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in module.named_parameters())
    buffers = tuple((n, tuple(b.shape), b.dtype) for n, b in module.named_buffers())
    return type(module), params, buffers


def _longest_run(children: list[Any]) -> tuple[int, int]:
    """(start, length) of the longest run of identical consecutive modules."""
    best, start = (0, 1 if children else 0), 0
    for i in range(1, len(children) + 1):
        if i == len(children) or _signature(children[i]) != _signature(children[start]):
            if i - start > best[1]:
                best = (start, i - start)
            start = i
    return best


_SETTINGS = (bool, int, float, str, type(None))


def _settings(block: Any) -> dict[str, Any]:
    """A block's plain settings (numbers, strings, flags) by dotted name: what may make two
    blocks of the same parameters compute differently (a sliding window on some layers)."""
    found = {}
    for path, module in block.named_modules():
        for name, value in vars(module).items():
            if not name.startswith("_") and isinstance(value, _SETTINGS):
                found[f"{path}.{name}" if path else name] = value
    return found


def differing_setting(blocks: list[Any]) -> tuple[str, list[Any]] | None:
    """A setting that splits the blocks into kinds: one with more than one value, but not a
    different value in every block (as a layer index has)."""
    settings = [_settings(b) for b in blocks]
    for name in settings[0]:
        values = [s.get(name) for s in settings]
        distinct = list(dict.fromkeys(values))
        if 1 < len(distinct) < len(blocks):
            return name, distinct
    return None


def _numel(modules: list[Any]) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


def find_blocks(model: Any, name: str | None = None) -> BlockRun:
    """The blocks to plan: in the list ``name`` (a dotted module name) when given, else in
    the ModuleList or Sequential whose longest run of identical modules holds the most
    parameters (then has the most modules). UnplannableModel where blocks of the same
    parameters are configured differently (``differing_setting``)."""
    found = _named_or_found(model, name)
    blocks = list(model.get_submodule(found.path))[found.first : found.first + found.count]
    if hasattr(blocks[0], "_checkpoint_wrapped_module"):  # torch.distributed's checkpoint_wrapper
        raise UnplannableModel(
            f"the blocks at {found.path or type(model).__name__} are already wrapped for activation checkpointing ({type(blocks[0]).__name__}), "
            "so every one recomputes whatever a plan says; plan the model before wrapping its blocks, and let apply() decide what they recompute"
        )
    differing = differing_setting(blocks)
    if differing is not None:
        setting, values = differing
        shown = ", ".join(repr(v) for v in values[:4])
        raise UnplannableModel(
            f"the blocks at {found.path or type(model).__name__} have the same parameters but differ in '{setting}' ({shown}), "
            "so they need not save the same; memplan plans blocks that are identical"
        )
    return found


def _named_or_found(model: Any, name: str | None) -> BlockRun:
    from torch import nn

    def run_of(path: str, container: Any) -> BlockRun:
        children = list(container)
        start, length = _longest_run(children)
        return BlockRun(path, start, length, type(children[start]).__name__ if children else "")

    if name:
        try:
            container = model.get_submodule(name)
        except AttributeError:
            raise UnplannableModel(
                f"blocks '{name}': no such module in {type(model).__name__}; accepted: the dotted name of a ModuleList or Sequential of blocks"
            ) from None
        if not isinstance(container, (nn.ModuleList, nn.Sequential)) or len(container) == 0:
            raise UnplannableModel(f"blocks '{name}' is a {type(container).__name__}, not a non-empty ModuleList or Sequential of blocks")
        return run_of(name, container)
    best: tuple[tuple[int, int], BlockRun] | None = None
    for path, module in model.named_modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) >= 2:
            found = run_of(path, module)
            key = (_numel(list(module)[found.first : found.first + found.count]), found.count)
            if found.count >= 2 and (best is None or key > best[0]):
                best = (key, found)
    if best is None:
        raise UnplannableModel(
            f"{type(model).__name__}: no repeated blocks found (no ModuleList or Sequential holds two or more identical modules); "
            "name the list of blocks with blocks="
        )
    return best[1]


# -- the model's step --------------------------------------------------------------------


def call_model(model: Any, batch: Any) -> Any:
    """``model(**batch)`` for a mapping, ``model(*batch)`` for a tuple or list, else ``model(batch)``."""
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def default_loss(output: Any, _batch: Any) -> Any:
    """The loss in a model's output: a scalar tensor, or an output's ``loss``."""
    import torch

    if isinstance(output, torch.Tensor) and output.numel() == 1:
        return output
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss
    raise UnplannableModel(
        f"the model's output ({type(output).__name__}) is not a loss (a scalar tensor, or an output with a scalar 'loss', "
        "e.g. a Hugging Face model given labels); pass loss_fn=(output, batch) -> loss"
    )


def batch_rows(batch: Any, rows: int) -> Any:
    """The first ``rows`` samples of every tensor in ``batch`` (its first dimension)."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t[:rows] if isinstance(t, torch.Tensor) and t.dim() else t, batch)


def batch_shape(batch: Any) -> tuple[int, int]:
    """(batch, sequence): from the first (batch, seq) matrix of token ids, else from the first
    tensor of two or three dimensions (batch, seq[, width]); a batch of images alone has no
    sequence (rows, 0)."""
    import torch
    from torch.utils._pytree import tree_flatten

    tensors = [t for t in tree_flatten(batch)[0] if isinstance(t, torch.Tensor) and t.dim()]
    if not tensors:
        raise UnplannableModel("the example batch holds no tensor; accepted: a tensor, or a tuple, list or dict of tensors")
    ids = [t for t in tensors if t.dim() == 2 and not t.is_floating_point()]
    first = (ids or [t for t in tensors if t.dim() in (2, 3)] or tensors)[0]
    return int(first.shape[0]), int(first.shape[1]) if first.dim() in (2, 3) else 0


def fake_like(batch: Any, device: Any) -> Any:
    """Under an active FakeTensorMode: fake tensors with the batch's shapes and dtypes on ``device``."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device) if isinstance(t, torch.Tensor) else t, batch)


@contextmanager
def no_kv_cache(model: Any) -> Iterator[None]:
    """A Hugging Face model with ``use_cache`` off in every config it holds while inside: a
    key/value cache is state that a recomputed block would extend twice (Hugging Face's own
    gradient checkpointing turns it off too), and a cross-attention cache hands the next
    call tensors of the last one's graph."""
    configs = cache_configs(model)
    for config in configs:
        config.use_cache = False
    try:
        yield
    finally:
        for config in configs:
            config.use_cache = True


def autocast_for(device: Any, precision: PrecisionSpec) -> Any:
    from contextlib import nullcontext

    import torch

    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if precision.autocast else nullcontext()


# -- the parameters ------------------------------------------------------------------------


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


def _unique(tensors: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for t in tensors:
        seen.setdefault(id(t), t)
    return list(seen.values())


def fake_copy(model: Any, device: Any, precision: PrecisionSpec) -> Any:
    """Under an active FakeTensorMode: the model with fake parameters and buffers on
    ``device`` (tied parameters stay tied), in training mode; the model itself is untouched."""
    import torch
    from torch import nn

    memo: dict[int, Any] = {}
    for p in _unique(model.parameters()):
        dtype = torch.bfloat16 if precision.param_itemsize == 2 and p.is_floating_point() else p.dtype
        memo[id(p)] = nn.Parameter(torch.empty(p.shape, dtype=dtype, device=device), requires_grad=p.requires_grad)
    for b in _unique(model.buffers()):
        memo[id(b)] = torch.empty(b.shape, dtype=b.dtype, device=device)
    # tensors a module holds as plain attributes, not buffers (GPT-J's sinusoidal positions in
    # transformers 4.46): faked as buffers are, which a copy under fake tensors cannot copy
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, torch.Tensor) and id(value) not in memo:
                memo[id(value)] = torch.empty(value.shape, dtype=value.dtype, device=device)
    try:
        fake = copy.deepcopy(model, memo)
    except Exception as exc:  # noqa: BLE001 - any failure to copy is the model's: one line
        raise UnplannableModel(
            f"{type(model).__name__} cannot be copied for calibration ({type(exc).__name__}: {_first_line(exc)})"
        ) from None
    for config in cache_configs(fake):
        config.use_cache = False  # see no_kv_cache
    return fake.train()


# -- the recorded block call -----------------------------------------------------------------


class _Stop(Exception):
    pass


@dataclass
class BlockCall:
    """How the model calls its first block: positional and keyword arguments (the hidden
    input at ``hidden``: an index or a name) and what the block returned."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    hidden: int | str
    output: Any
    # the other tensors that needed a gradient in the model's call (an encoder's output
    # handed to each decoder block, a position bias the first block computed), as
    # positions in tree_flatten((args, kwargs))
    grad_inputs: tuple[int, ...] = ()

    @property
    def x(self) -> Any:
        return self.args[self.hidden] if isinstance(self.hidden, int) else self.kwargs[self.hidden]

    def with_x(self, x: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if isinstance(self.hidden, int):
            return (*self.args[: self.hidden], x, *self.args[self.hidden + 1 :]), self.kwargs
        return self.args, {**self.kwargs, self.hidden: x}

    def fresh_x(self, device: Any = None) -> Any:
        """A hidden input of the recorded one's shape, as the last block's output is: a copy
        of a leaf, not the leaf (autocast caches its casts of leaves, so a leaf input would
        share one cast among the block's projections)."""
        import torch

        return torch.randn(self.x.shape, dtype=self.x.dtype, device=device, requires_grad=True).clone()

    def with_grad_inputs(self) -> BlockCall:
        """The call with each of ``grad_inputs`` as the model hands it: a tensor that is not
        a leaf and needs a gradient. A block then saves what that gradient takes (the
        weights' casts of an encoder's output's projections) and computes it, and autocast
        casts it afresh in each op (it caches only a leaf's casts). Made once, before a
        measurement: what came before the blocks is not the block's."""
        from torch.utils._pytree import tree_flatten, tree_unflatten

        if not self.grad_inputs:
            return self
        flat, spec = tree_flatten((self.args, self.kwargs))
        for i in self.grad_inputs:
            flat[i] = flat[i].detach().requires_grad_().clone()
        args, kwargs = tree_unflatten(flat, spec)
        return replace(self, args=tuple(args), kwargs=dict(kwargs))

    def output_like(self, x: Any) -> Any:
        """The block's output structure with ``x`` as its hidden output."""
        import torch

        out = self.output
        if isinstance(out, torch.Tensor):
            return x
        if isinstance(out, (tuple, list)):
            i = next(i for i, o in enumerate(out) if isinstance(o, torch.Tensor))
            return type(out)((x if j == i else o) for j, o in enumerate(out))
        raise UnplannableModel(
            f"a block returned {type(out).__name__}; accepted: a tensor, or a tuple or list whose first tensor is the hidden output"
        )


def hidden_of(output: Any) -> Any:
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        for o in output:
            if isinstance(o, torch.Tensor):
                return o
    if isinstance(output, Mapping):
        for o in output.values():
            if isinstance(o, torch.Tensor):
                return o
    raise UnplannableModel(f"a block returned {type(output).__name__}, which holds no tensor")


def _hidden_index(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | str:
    import torch

    if args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
        return 0
    for name in HIDDEN_NAMES:
        if isinstance(kwargs.get(name), torch.Tensor):
            return name
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return i
    for name, v in kwargs.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return name
    raise UnplannableModel(
        "the blocks are called without a floating-point tensor input; memplan plans blocks that transform a hidden state"
    )


def record_call(model: Any, block: Any, batch: Any, *, label: str, context: Any) -> BlockCall:
    """Run ``model`` on ``batch`` until ``block`` has run once; its call and output."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    seen: dict[str, Any] = {}

    def before(_m: Any, args: tuple, kwargs: dict) -> None:
        seen["args"], seen["kwargs"] = args, kwargs

    def after(_m: Any, _args: tuple, _kwargs: dict, out: Any) -> None:
        seen["out"] = out
        raise _Stop

    handles = [block.register_forward_pre_hook(before, with_kwargs=True), block.register_forward_hook(after, with_kwargs=True)]
    try:
        with context:
            call_model(model, batch)
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
    if "out" not in seen:
        raise UnplannableModel(f"{label} never ran in the model's forward")

    def detach(t: Any) -> Any:
        return t.detach() if isinstance(t, torch.Tensor) else t

    args, kwargs = tree_map(detach, seen["args"]), tree_map(detach, seen["kwargs"])
    hidden = _hidden_index(tuple(args), dict(kwargs))
    x = args[hidden] if isinstance(hidden, int) else kwargs[hidden]
    flat = tree_flatten((seen["args"], seen["kwargs"]))[0]
    grad_inputs = tuple(
        i
        for i, (t, d) in enumerate(zip(flat, tree_flatten((args, kwargs))[0], strict=True))
        if isinstance(t, torch.Tensor) and t.requires_grad and d is not x
    )
    return BlockCall(tuple(args), dict(kwargs), hidden, tree_map(detach, seen["out"]), grad_inputs)


# -- fake-tensor measurement -----------------------------------------------------------------


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


def _pass_through(block: Any, call: BlockCall, on_input: Callable[[Any, tuple, dict], Any]) -> Any:
    """A module that stands for ``block`` in the head's step: hands on, in the block's output
    structure, what ``on_input(hidden, args, kwargs)`` returns for its hidden input.

    It is the block itself in all but its forward: an instance of a subclass of the block's
    class sharing the block's attributes, buffers and submodules, so that whatever the
    model's own loop reads of its layers (a layer's ``attention_type`` choosing its mask, a
    sliding window, a layer index) reads the same, whichever library version wrote the loop,
    and ``isinstance`` checks still hold. The parameters it shares were made before the
    step's tracker, which counts none of them."""
    cls = type(block)

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


# Functions by which libraries ask "is this tensor fake?", to take a tracing path (a
# materialised mask, repeated key/value heads) instead of the one a real step takes.
# Calibration answers False, so that fake tensors measure the real step; where the eager
# path needs the data (a padding mask checked for zeros), it calibrates the tracing path.
TRACING_CHECKS = (("transformers.utils.import_utils", "is_fake_tensor"),)


@contextmanager
def as_eager(enabled: bool = True) -> Iterator[None]:
    import sys

    patched = []
    for module_name, attr in TRACING_CHECKS if enabled else ():
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, attr):
            patched.append((module, attr, getattr(module, attr)))
            setattr(module, attr, lambda *_a, **_k: False)
    try:
        yield
    finally:
        for module, attr, original in patched:
            setattr(module, attr, original)


def fake_as_real() -> Any:
    """A dispatch mode over fake tensors that answers as a real step would, where torch's
    fake kernels answer otherwise:

    - the truth value of a fake boolean tensor (``mask.all()`` in an ``if``) is True: a mask
      without padding, sequences not packed, the common case of a training batch. Other
      values read from fake data stay an error.
    - but a uniform draw compared with a number (LayerDrop: ``torch.rand([]) < layerdrop``
      skips a layer) answers as the draw most often would: true where the comparison holds
      with a probability over one half, so a block dropped with probability 0 (BART's
      and Whisper's default under transformers 4.x) or 0.1 runs, as it does in most steps.
    - a grouped matrix product (mixture-of-experts layers) of float32 operands, which the
      real kernels multiply (a model trained in float32 weights under autocast) and torch's
      fake kernel refuses, takes its shape from the fake kernel asked in bf16 and keeps the
      operands' dtype."""
    import torch

    aten = torch.ops.aten
    local_scalar = aten._local_scalar_dense.default
    grouped = getattr(getattr(aten, "_grouped_mm", None), "default", None)
    uniform = {aten.rand.default, aten.uniform.default, aten.uniform_.default}
    # P(draw OP number) for a draw uniform in [0, 1)
    below = {aten.lt.Scalar: lambda p: p, aten.le.Scalar: lambda p: p, aten.gt.Scalar: lambda p: 1 - p, aten.ge.Scalar: lambda p: 1 - p}

    class FakeAsReal(dispatch_mode_base()):  # type: ignore[misc]  # the base is torch's dispatch mode of the installed version, chosen at run time
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is local_scalar and args[0].dtype == torch.bool:
                return getattr(args[0], "_trainstack_likely", True)
            if func is grouped and kwargs.get("out_dtype") is None and args[0].dtype == args[1].dtype != torch.bfloat16:
                a, b, *rest = args
                return func(a.to(torch.bfloat16), b.to(torch.bfloat16), *rest, **kwargs).to(a.dtype)
            out = func(*args, **kwargs)
            if (
                func in uniform
                and isinstance(out, torch.Tensor)
                and (tuple(args[1:3]) or (kwargs.get("from", 0), kwargs.get("to", 1))) in ((0, 1), (0.0, 1.0))
            ):
                out._trainstack_uniform = True  # a draw in [0, 1), as torch.rand makes
            elif func in below and getattr(args[0], "_trainstack_uniform", False) and isinstance(args[1], (int, float)):
                out._trainstack_likely = below[func](float(args[1])) > 0.5
            return out

    return FakeAsReal()


FAKE_ERRORS_HINT = "memplan calibrates on fake tensors, which need a fake (meta) kernel for every op and no data-dependent shapes"


def _fake_failure(exc: BaseException, model: Any = None) -> str | None:
    """One line for a failure of fake-tensor execution, or None for another failure."""
    from torch._subclasses import fake_tensor as ft

    if isinstance(exc, ft.UnsupportedOperatorException):
        return f"op {exc.func} has no fake-tensor kernel ({FAKE_ERRORS_HINT})"
    if isinstance(exc, (ft.DynamicOutputShapeException, ft.DataDependentOutputException)) and _has_experts(model):
        return (
            f"op {exc.func} has a data-dependent output: its mixture-of-experts layers gather each expert's tokens by the router's "
            "choice, a number of tokens fake tensors cannot know (experts computed as grouped matrix products, as transformers 5 "
            "computes them, are planned)"
        )
    if isinstance(exc, (ft.DynamicOutputShapeException, ft.DataDependentOutputException)):
        return f"op {exc.func} has a data-dependent output ({FAKE_ERRORS_HINT})"
    if isinstance(exc, ft.UnsupportedFakeTensorException):
        return f"a tensor cannot be faked ({_first_line(exc)}; {FAKE_ERRORS_HINT})"
    return None


def _has_experts(model: Any) -> bool:
    """Whether ``model`` holds a mixture of experts (a module named ``experts``)."""
    return model is not None and any(name.rsplit(".", 1)[-1] == "experts" for name, _ in model.named_modules())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


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
    on the libraries' eager path (``TRACING_CHECKS``), else, where that needs the data, on
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
        reason = _fake_failure(exc, model)
        if reason is None:
            raise UnplannableModel(
                f"{type(model).__name__} failed under calibration at {where} or around it ({type(exc).__name__}: {_first_line(exc)})"
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
    total = _param_bytes(_unique(model.parameters()), optimizer, precision)
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
    largest_trained = _largest_trained(_unique(model.parameters()), precision)
    return Profile(
        n_blocks=n,
        block_param_bytes=block_params.params,
        other_param_bytes=others[0],
        buffer_bytes=sum(b.numel() * b.element_size() for b in _unique(model.buffers())),
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
        + optimizer.largest_scratch * _largest_state_tensor(_unique(model.parameters()), precision),
        largest_param_elements=largest_trained[0],
        largest_param_bytes=largest_trained[1],
        blocks=run.path,
        first_block=run.first,
        optimizer=optimizer.name,
        precision=precision.name,
    )

"""How a model calls its first block, recorded by running the model until that block has
run: the hidden input, whatever else the model passes (masks, position embeddings), and
the block's output."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainstack.memplan.blocks import UnplannableModel
from trainstack.memplan.model_step import call_model


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


class _Stop(Exception):
    """Raised once the block has run: the rest of the model's forward is not needed."""


HIDDEN_NAMES = ("hidden_states", "hidden_state", "x", "input", "inputs", "hidden")


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

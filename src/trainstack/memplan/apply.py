"""Apply a plan to a model: wrap each block for keep, selective or full recompute.

Full and selective recompute go through torch.utils.checkpoint (non-reentrant); selective
keeps the outputs of matrix products and attention and recomputes everything else
(norms, rotary embeddings, activations, dtype casts). Wrapping keeps parameter names.
"""

from __future__ import annotations

from functools import cache, partial
from typing import TYPE_CHECKING

from trainstack.memplan.plan import Choice, Plan

if TYPE_CHECKING:
    from torch import nn


@cache
def save_ops() -> frozenset[object]:
    """The ops whose outputs selective recompute keeps: matrix products and attention."""
    import torch

    aten = torch.ops.aten
    names = (
        "mm",
        "addmm",
        "bmm",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    return frozenset(getattr(aten, n).default for n in names if hasattr(aten, n))


def save_matmuls_policy(ctx: object, op: object, *args: object, **kwargs: object) -> object:
    """Selective policy: keep what costs FLOPs to recompute, recompute what costs only bandwidth."""
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in save_ops() else CheckpointPolicy.PREFER_RECOMPUTE


def wrap(block: nn.Module, choice: Choice) -> nn.Module:
    """``block`` itself for keep; a checkpoint wrapper around it otherwise."""
    if choice is Choice.KEEP:
        return block
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    kwargs: dict[str, object] = {"preserve_rng_state": False}
    if choice is Choice.SELECTIVE:
        kwargs["context_fn"] = partial(create_selective_checkpoint_contexts, save_matmuls_policy)
    return checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT, **kwargs)


def unwrap(block: nn.Module) -> nn.Module:
    inner = getattr(block, "_checkpoint_wrapped_module", None)
    return inner if inner is not None else block


def apply_choices(model: nn.Module, choices: tuple[Choice, ...] | list[Choice]) -> nn.Module:
    """Wrap ``model.layers[i]`` per ``choices[i]``, replacing any earlier plan."""
    layers = model.layers
    if len(choices) != len(layers):
        raise ValueError(f"a plan for {len(choices)} blocks cannot apply to a model of {len(layers)}")
    for i, choice in enumerate(choices):
        layers[i] = wrap(unwrap(layers[i]), choice)
    return model


def apply(model: nn.Module, plan: Plan) -> nn.Module:
    """Wrap each block of ``model`` (its ``layers``) as ``plan`` says; returns the same model."""
    return apply_choices(model, plan.choices)

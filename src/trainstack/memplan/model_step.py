"""A model's training step as memplan runs it: the model called on a batch, its loss, the
batch's rows and shape, autocast, and no key/value cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from trainstack.memplan.blocks import UnplannableModel
from trainstack.memplan.optim import PrecisionSpec
from trainstack.memplan.wrappers import cache_configs

LossFn = Callable[[Any, Any], Any]


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
    """``torch.autocast`` to bf16 on ``device``'s type where ``precision`` autocasts, else a context that does nothing."""
    from contextlib import nullcontext

    import torch

    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if precision.autocast else nullcontext()

"""Grouped-query attention in the compiler's runtime estimate.

Under an activation memory budget below 1, torch.compile's partitioner ranks what to
recompute by each op's FLOPs, counted by ``torch.utils.flop_counter``. Before torch 2.13 its
attention formulas require the key and value to have as many heads as the query, so any
grouped-query model (Llama, Qwen2, Mistral: fewer key/value heads) failed to compile with
"sdpa_flop_count: query/key/value shapes are incompatible". A grouped-query kernel does the
work of every query head, so its count is the formula's with the key and value widened to
the query's heads: ``grouped_query_flops()`` counts it that way, through torch's own
formulas, while a compile runs (on torch 2.13 and later the counts are the same)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

_FORWARD = (
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_cudnn_attention",
)
_BACKWARD = tuple(f"{name}_backward" for name in _FORWARD)


def _widened(shape: Any, heads: int) -> Any:
    """A (batch, heads, seq, dim) key or value shape with the query's heads."""
    return (shape[0], heads, *shape[2:])


def _forward(count: Callable[..., int]) -> Callable[..., int]:
    def formula(query: Any, key: Any, value: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
        return count(query, _widened(key, query[1]), _widened(value, query[1]))

    return formula


def _backward(count: Callable[..., int]) -> Callable[..., int]:
    def formula(grad_out: Any, query: Any, key: Any, value: Any, *_: Any, out_shape: Any = None, **__: Any) -> int:
        return count(grad_out, query, _widened(key, query[1]), _widened(value, query[1]))

    return formula


@contextmanager
def grouped_query_flops() -> Iterator[None]:
    """While active, FLOP counters count attention whose key and value have fewer heads
    than the query (torch's formulas, key and value widened to the query's heads)."""
    import torch
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    forward, backward = fc.shape_wrapper(_forward(fc.sdpa_flop_count)), fc.shape_wrapper(_backward(fc.sdpa_backward_flop_count))
    formulas = {getattr(aten, n): forward for n in _FORWARD if hasattr(aten, n)}
    formulas |= {getattr(aten, n): backward for n in _BACKWARD if hasattr(aten, n)}
    with mock.patch.dict(fc.flop_registry, formulas):
        yield

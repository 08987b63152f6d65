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

_FORWARD = (
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_cudnn_attention",
)
_BACKWARD = tuple(f"{name}_backward" for name in _FORWARD)


def _widened(count: Callable[..., int], query_at: int) -> Callable[..., int]:
    """``count`` (a formula over shapes: the query at ``query_at``, the key and value after
    it) with the key's and value's heads widened to the query's."""

    def formula(*shapes: Any, out_shape: Any = None, **_: Any) -> int:
        query, key, value = shapes[query_at : query_at + 3]
        heads = query[1]  # (batch, heads, seq, dim)
        return count(*shapes[:query_at], query, (key[0], heads, *key[2:]), (value[0], heads, *value[2:]))

    return formula


@contextmanager
def grouped_query_flops() -> Iterator[None]:
    """While active, FLOP counters count attention whose key and value have fewer heads
    than the query (torch's formulas, key and value widened to the query's heads)."""
    from unittest import mock  # imports asyncio: kept out of every command's start, as torch is

    import torch
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    # the backward's formula takes the output's gradient first, then query, key and value
    forward, backward = fc.shape_wrapper(_widened(fc.sdpa_flop_count, 0)), fc.shape_wrapper(_widened(fc.sdpa_backward_flop_count, 1))
    formulas = {getattr(aten, n): forward for n in _FORWARD if hasattr(aten, n)}
    formulas |= {getattr(aten, n): backward for n in _BACKWARD if hasattr(aten, n)}
    with mock.patch.dict(fc.flop_registry, formulas):
        yield

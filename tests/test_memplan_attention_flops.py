"""Grouped-query attention in the compiler's runtime estimate (attention_flops).

Meta tensors stand for the GPU's attention kernels, which this machine cannot run; the
partitioner and the FLOP counter are torch's own. On torch before 2.13 (2.11 checked) the
partition test fails without ``grouped_query_flops()`` with "sdpa_flop_count:
query/key/value shapes are incompatible", as compiling Qwen2 and Llama did on an H200."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from trainstack.memplan.attention_flops import grouped_query_flops  # noqa: E402

aten = torch.ops.aten
BATCH, HEADS, KV_HEADS, SEQ, DIM = 2, 8, 2, 64, 32


def _attention(op, q, k, v):
    if op is aten._scaled_dot_product_flash_attention:
        return op(q, k, v)[0]
    return op(q, k, v, None, True)[0]


def _flops(op, kv_heads: int, backward: bool) -> dict[str, int]:
    q = torch.randn(BATCH, HEADS, SEQ, DIM, device="meta", requires_grad=backward)
    k, v = (torch.randn(BATCH, kv_heads, SEQ, DIM, device="meta", requires_grad=backward) for _ in range(2))
    with FlopCounterMode(display=False) as mode:
        out = _attention(op, q, k, v)
        if backward:
            out.backward(torch.ones_like(out))
    return {str(name): n for name, n in mode.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize(
    ("name", "backward"),
    [
        ("_scaled_dot_product_flash_attention", True),
        ("_scaled_dot_product_cudnn_attention", True),
        # the meta kernel of its backward returns query-shaped key and value gradients
        ("_scaled_dot_product_efficient_attention", False),
    ],
)
def test_grouped_query_attention_counts_the_work_of_every_query_head(name: str, backward: bool) -> None:
    op = getattr(aten, name)
    widened = _flops(op, HEADS, backward)  # key and value with the query's heads: torch's own count
    with grouped_query_flops():
        grouped = _flops(op, KV_HEADS, backward)
    assert grouped == widened
    assert all(n > 0 for n in grouped.values()) and len(grouped) == (2 if backward else 1)


def test_the_formulas_are_torch_own_again_after_the_context() -> None:
    from torch.utils import flop_counter

    before = dict(flop_counter.flop_registry)
    with grouped_query_flops():
        assert flop_counter.flop_registry[aten._scaled_dot_product_flash_attention] is not before[aten._scaled_dot_product_flash_attention]
    assert flop_counter.flop_registry == before


def _saved_by_forward(budget: float) -> int:
    """The tensors the partitioner has the forward save for a grouped-query attention
    with cheap ops around it, under ``activation_memory_budget = budget``."""
    import torch._functorch.config as functorch_config
    from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition

    def attention(x, wq, wk, wv):
        q = (x @ wq).view(BATCH, SEQ, HEADS, DIM).transpose(1, 2).sin()
        k = (x @ wk).view(BATCH, SEQ, KV_HEADS, DIM).transpose(1, 2).cos()
        v = (x @ wv).view(BATCH, SEQ, KV_HEADS, DIM).transpose(1, 2).relu()
        return aten._scaled_dot_product_flash_attention(q, k, v)[0].sum()

    outputs: list[int] = []

    def forward_compiler(gm, _):
        outputs.append(len(next(n for n in gm.graph.nodes if n.op == "output").args[0]))
        return make_boxed_func(gm)

    width = HEADS * DIM
    args = [torch.randn(BATCH, SEQ, width, device="meta", requires_grad=True)]
    args += [torch.randn(width, n * DIM, device="meta", requires_grad=True) for n in (HEADS, KV_HEADS, KV_HEADS)]
    compiled = aot_function(attention, fw_compiler=forward_compiler, bw_compiler=lambda gm, _: make_boxed_func(gm), partition_fn=min_cut_rematerialization_partition)
    with functorch_config.patch(activation_memory_budget=budget, enable_autograd_cache=False), grouped_query_flops():
        compiled(*args).backward()
    return outputs[0]


def test_the_partitioner_meets_a_budget_around_grouped_query_attention() -> None:
    # under a budget the partitioner estimates every op's runtime, attention's included
    assert _saved_by_forward(0.1) < _saved_by_forward(1.0)

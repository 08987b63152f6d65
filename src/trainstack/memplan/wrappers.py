"""Apply a plan to a model: wrap each block for keep, selective or full recompute.

Full and selective recompute go through torch.utils.checkpoint (non-reentrant); selective
keeps the outputs of matrix products and attention and recomputes everything else
(norms, rotary embeddings, activations, dtype casts). Blocks stay where they are.
``compile_block`` compiles a block; a kept one can be given an activation memory budget,
which torch.compile's partitioner meets by recomputing cheap ops inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, Any, cast

from trainstack.memplan.attention_flops import grouped_query_flops
from trainstack.memplan.costs import Choice, Plan

if TYPE_CHECKING:
    from torch import nn


@cache
def save_ops() -> frozenset[object]:
    """The ops whose outputs selective recompute keeps: matrix products (the grouped ones of
    mixture-of-experts layers too) and attention."""
    import torch

    aten = torch.ops.aten
    names = (
        "mm",
        "addmm",
        "bmm",
        "_grouped_mm",
        "_scaled_mm",
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


def _checkpointed(forward: Callable[..., Any], choice: Choice) -> Callable[..., Any]:
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    extra: dict[str, Any] = {}
    if choice is Choice.SELECTIVE:
        extra["context_fn"] = partial(create_selective_checkpoint_contexts, save_matmuls_policy)

    marked = _marked(forward)

    # the RNG state is kept so that a block with dropout recomputes the same masks
    def recomputed(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(marked, *args, use_reentrant=False, preserve_rng_state=True, **extra, **kwargs)

    return recomputed


RECOMPUTE_RANGE = "trainstack.recompute"


def _marked(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward``, run again in backward (a recompute) inside a profiler range of that name, so
    that a profile tells recompute from the first forward; compiled code is left as it is.
    The range is the kind inductor's kernels open, which dispatches no op: selective
    recompute's policy sees the block's own ops alone."""
    import torch
    from torch._C._profiler import _RecordFunctionFast

    def run(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or torch._C._current_graph_task_id() == -1:
            return forward(*args, **kwargs)
        with _RecordFunctionFast(RECOMPUTE_RANGE):
            return forward(*args, **kwargs)

    return run


def wrap(block: nn.Module, choice: Choice) -> nn.Module:
    """Make ``block`` keep, or recompute in backward, per ``choice``; returns the same module.

    The block's own ``forward`` is replaced on the instance, so module tree, parameter names,
    hooks, torch.compile and FSDP see the block unchanged.
    """
    unwrap(block)
    if choice is not Choice.KEEP:
        block.forward = _checkpointed(block.forward, choice)
        block.__dict__["_memplan_choice"] = choice
    return block


def unwrap(block: nn.Module) -> nn.Module:
    """Undo ``wrap``: the block computes and keeps as its class defines."""
    if "_memplan_choice" in block.__dict__:
        del block.forward
        del block._memplan_choice
    return block


def choice_of(block: nn.Module) -> Choice:
    return block.__dict__.get("_memplan_choice", Choice.KEEP)


def block_list(model: nn.Module, blocks: str | None = None) -> nn.ModuleList | nn.Sequential:
    """The list of blocks: the module named ``blocks`` (dotted; "" is the model itself), or ``model.layers``."""
    found = model.layers if blocks is None else model.get_submodule(blocks)
    return cast("nn.ModuleList | nn.Sequential", found)  # a plan's blocks are such a list (blocks.find_blocks)


def library_checkpointing_off(module: nn.Module) -> None:
    """Turn off a library's own activation checkpointing in ``module`` and below (Hugging
    Face layers checkpoint themselves while their ``gradient_checkpointing`` is True, after
    ``model.gradient_checkpointing_enable()``). A block measured or planned with it on
    would recompute where the plan says keep."""
    for m in module.modules():
        if m.__dict__.get("gradient_checkpointing") is True:
            m.__dict__["gradient_checkpointing"] = False


def apply_choices(model: nn.Module, choices: tuple[Choice, ...] | list[Choice], blocks: str | None = None, first: int = 0) -> nn.Module:
    """Wrap block ``first + i`` of the list ``blocks`` (default ``model.layers``) per
    ``choices[i]``, replacing any earlier plan and the blocks' own library checkpointing
    (the plan decides what they recompute)."""
    layers = block_list(model, blocks)
    if (blocks is None and len(choices) != len(layers)) or first + len(choices) > len(layers):
        raise ValueError(f"a plan for {len(choices)} blocks cannot apply to a model of {len(layers)}")
    for block, choice in zip(list(layers)[first : first + len(choices)], choices):
        library_checkpointing_off(block)
        wrap(block, choice)
    if any(c is not Choice.KEEP for c in choices):
        # a key/value cache would be extended again by each recomputed block (Hugging Face's
        # own gradient checkpointing turns it off too)
        for config in cache_configs(model):
            config.use_cache = False
    return model


def cache_configs(model: nn.Module) -> list[Any]:
    """Every distinct ``config`` of the model and its submodules with ``use_cache`` on: an
    encoder-decoder's decoder keeps a config of its own, which the model's does not reach."""
    seen: set[int] = set()
    found = []
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and id(config) not in seen:
            seen.add(id(config))
            if getattr(config, "use_cache", None):
                found.append(config)
    return found


def apply(model: nn.Module, plan: Plan) -> nn.Module:
    """Wrap each planned block of ``model`` as ``plan`` says; returns the same model."""
    return apply_choices(model, plan.choices, plan.blocks, plan.first_block)


def compile_block(block: nn.Module, budget: float | None = None) -> nn.Module:
    """``torch.compile(block)``; a kept block with a ``budget`` below 1 is compiled under that
    activation memory budget (for this block alone, not the process)."""
    import torch

    # torch.compile of a module is a module (an OptimizedModule); its annotation says only a callable
    if budget is None or budget >= 1 or choice_of(block) is not Choice.KEEP:
        return cast("nn.Module", torch.compile(block))
    return cast("nn.Module", torch.compile(block, backend=budget_backend(budget)))


@cache
def budget_backend(budget: float) -> Callable[..., Any]:
    """Inductor, with the partitioner's activation memory budget set to ``budget`` while it
    splits this graph into forward and backward (one backend per budget, so torch.compile
    keeps one compiled graph per budget). The partitioner counts grouped-query attention's
    FLOPs as ``attention_flops`` does (torch before 2.13 cannot)."""

    def backend(gm: Any, example_inputs: Any) -> Any:
        import torch._functorch.config as functorch_config
        from torch._inductor.compile_fx import compile_fx

        # no autograd cache: a graph partitioned under another budget must not be reused
        with functorch_config.patch(activation_memory_budget=budget, enable_autograd_cache=False), grouped_query_flops():
            return compile_fx(gm, example_inputs)

    backend.__name__ = f"inductor_memory_budget_{budget:g}"
    return backend


def reset_compiler(compiled: bool) -> None:
    """Drop the code torch.compile made for measured blocks (when ``compiled``), so that the
    blocks planned afterwards compile afresh."""
    if compiled:
        import torch._dynamo

        torch._dynamo.reset()

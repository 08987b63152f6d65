"""Training modes applied to a model: activation checkpointing, memplan's plan and torch.compile
per block (the modes' grammar is trainstack.nn.modes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from trainstack.errors import TrainstackError
from trainstack.memplan import apply, plan_memory
from trainstack.memplan import plan as plan_model
from trainstack.memplan.costs import Choice
from trainstack.memplan.wrappers import compile_block, wrap
from trainstack.nn.modes import Mode

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import nn


class ModeUnavailable(Exception):
    """The mode cannot run in this environment (its row says why)."""


def blocks(model: nn.Module) -> nn.ModuleList:
    """``model.layers``, the blocks of the bench decoder and of HfCausalLM (nn.Module's
    attribute lookup types a submodule ``Tensor | Module``)."""
    return cast("nn.ModuleList", model.layers)


def apply_checkpointing(model: nn.Module, mode: Mode) -> None:
    """Wrap ``model.layers`` in place according to ``mode.ac`` (none, full, every, selective),
    as memplan wraps the blocks of a plan."""
    for i, block in enumerate(blocks(model)):
        if mode.ac in ("full", "selective") or (mode.ac == "every" and i % mode.every == 0):
            wrap(block, Choice.SELECTIVE if mode.ac == "selective" else Choice.FULL)


def apply_planned(
    model: nn.Module,
    cfg,
    *,
    batch: int,
    seq: int,
    budget_bytes: int,
    world_size: int,
    compiled: bool = False,
    precision: str = "autocast-bf16",
    placement=None,
):
    """Let memplan choose what to recompute for ``budget_bytes`` (for compiled blocks when
    ``compiled``; ``precision`` as memplan names the mode's weights, gradients and optimizer
    state); returns (model, plan)."""
    try:
        example_batch = getattr(model, "example_batch", None)
        if example_batch is not None:  # a Hugging Face model: planned from the model itself
            plan = plan_model(
                model,
                example_batch(batch, seq),
                budget=budget_bytes,
                world_size=world_size,
                precision=precision,
                compiled=compiled,
                placement=placement,
            )
        else:
            plan = plan_memory(
                cfg,
                batch=batch,
                seq=seq,
                budget_bytes=budget_bytes,
                world_size=world_size,
                compiled=compiled,
                precision=precision,
                placement=placement,
            )
    except TrainstackError as exc:
        raise ModeUnavailable(f"memplan: {exc}") from None
    return apply(model, plan), plan


def apply_compile(model: nn.Module, keep_budget: float | None = None) -> None:
    """torch.compile each block (one graph, reused by every identical block) and the loss chunks;
    ``keep_budget``: the activation memory budget of the kept blocks (a plan's compiler_budget).

    Each block is replaced by its compiled wrapper rather than compiled in place, so that
    FSDP2's hooks, registered later on the wrapper, run outside the compiled graph.
    """
    layers = blocks(model)
    for i, block in enumerate(layers):
        layers[i] = compile_block(block, keep_budget)
    cast("Callable[[], None]", model.compile_loss)()  # the bench decoder's and HfCausalLM's method

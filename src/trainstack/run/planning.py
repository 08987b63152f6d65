"""The memory plan and compile for the model a job builds, through memplan.

``trainstack.memplan.plan(model, batch, budget=)`` plans any model where memplan has it;
otherwise trainstack's own decoder is planned from its config. A model memplan cannot plan
gets a one-line reason (``Unplannable``), never a guessed plan.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainstack import memplan
from trainstack.errors import TrainstackError
from trainstack.memplan import Choice, Plan
from trainstack.memplan.blocks import UnplannableModel, find_blocks
from trainstack.memplan.budget import host_memory_bytes, parse_budget
from trainstack.memplan.memory import peak_bytes
from trainstack.memplan.offload import Placement
from trainstack.memplan.overheads import default_overheads
from trainstack.memplan.placement import KINDS, Layout
from trainstack.memplan.planner import choose
from trainstack.memplan.wrappers import budget_backend, choice_of
from trainstack.nn.decoder import Transformer
from trainstack.nn.hf_check import check_config
from trainstack.run.capture import Captured


class Unplannable(Exception):
    """memplan cannot plan this model: the message says what is missing."""


def parse(budget: str, where: str) -> int:
    """Bytes of a budget written as for ``memplan --budget``; a fraction is of this GPU (of the
    host's memory where there is none, as memplan takes it)."""
    return parse_budget(budget, lambda: device_bytes() or host_memory_bytes(), flag=where)


def device_bytes() -> int | None:
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory


def usable_bytes() -> int | None:
    """What the job may allocate on its GPU: the device's memory times the process's cap."""
    total = device_bytes()
    if total is None:
        return None
    fraction = memory_fraction()
    return int(total * min(fraction if fraction is not None else 1.0, 1.0))


def memory_fraction(device: Any = None) -> float | None:
    """The process's cap on its GPU's memory (torch.cuda.set_per_process_memory_fraction);
    None where this torch cannot say."""
    get_fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None) or getattr(
        torch.cuda.memory, "get_per_process_memory_fraction", None
    )
    return float(get_fraction(device)) if get_fraction is not None else None


def blocks(model: nn.Module) -> list[nn.Module] | None:
    """The repeated blocks, as memplan finds them (the longest run of identical modules in a
    ModuleList or Sequential); None where there are none."""
    try:
        run = find_blocks(model)
    except UnplannableModel:
        return None
    return list(model.get_submodule(run.path).children())[run.first : run.first + run.count]


def batch_of(captured: Captured) -> Any:
    """The first batch as memplan takes an example batch (a mapping, one tensor, or a tuple)."""
    if captured.kwargs and not captured.args:
        return captured.kwargs
    return captured.args[0] if len(captured.args) == 1 and not captured.kwargs else captured.args


def precision_of(captured: Captured) -> str:
    """How the job computes, as memplan names it: bf16 parameters, bf16 autocast (around the
    call, or inside the forward as accelerate wraps it), or fp32."""
    params = next(iter(captured.model.parameters()), None)
    if params is not None and params.dtype == torch.bfloat16:
        return "bf16"
    wrapped = getattr(captured.root, "_original_forward", None) or getattr(captured.model, "_original_forward", None)
    if captured.autocast or wrapped is not None:
        return "autocast-bf16"
    return "fp32"


def job_layout(captured: Captured) -> Layout:
    """Where the job keeps its state, as memplan's placement names it: over the process
    group's ranks (one without one), FSDP2 where the job sharded its model with
    ``fully_shard`` (each rank then holds its shard), its parameters, gradients and optimizer
    state on the host where the job gave FSDP2 a CPUOffloadPolicy; else whole on each rank
    (one process, or data parallel)."""
    import torch.distributed as dist

    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule
    except ImportError:  # torch before 2.6 keeps FSDP2 under its composable APIs
        from torch.distributed._composable.fsdp import CPUOffloadPolicy, FSDPModule

    world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    sharded = [m for m in (captured.root, *captured.model.modules()) if isinstance(m, FSDPModule)]
    if not sharded:
        return Layout("none", world_size)
    groups = [m._get_fsdp_state()._fsdp_param_group for m in sharded]
    offloaded = any(isinstance(g.offload_policy, CPUOffloadPolicy) for g in groups if g is not None)
    return Layout("fsdp2", world_size, frozenset(KINDS) if offloaded else frozenset())


def plan_model(captured: Captured, budget_bytes: int, *, compiled: bool = False) -> Plan:
    """The plan memplan chooses for the captured model and batch under ``budget_bytes`` per
    rank, for the sharding and offload the job runs with (``job_layout``); BudgetError where
    nothing fits, Unplannable where memplan cannot plan the model."""
    model = captured.model
    layout = job_layout(captured)
    # one process keeps memplan's own path (whose error names the batch that would fit)
    placement = None if layout == Layout("none", 1) else Placement(shard=layout.shard, offload=layout.offload)

    if isinstance(model, Transformer):
        tokens = captured.args[0] if captured.args else None
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
            raise Unplannable("the decoder's first call did not take a (batch, seq) token tensor")
        return memplan.plan_memory(
            model.cfg,
            batch=tokens.shape[0],
            seq=tokens.shape[1],
            budget_bytes=budget_bytes,
            compiled=compiled,
            world_size=layout.world_size,
            placement=placement,
        )
    check_model_config(model)
    generic = getattr(memplan, "plan", None)
    if not callable(generic):
        raise Unplannable(f"this trainstack's memplan plans its own decoder, not a {type(model).__module__}.{type(model).__qualname__}")
    optimizer = captured.optimizer if captured.optimizer is not None else "adamw"
    return generic(
        model,
        batch_of(captured),
        budget=budget_bytes,
        optimizer=optimizer,
        precision=precision_of(captured),
        loss_fn=job_loss,
        compiled=compiled,
        world_size=layout.world_size,
        placement=placement,
    )


def check_model_config(model: nn.Module) -> None:
    """A Hugging Face model's config held to the rules a config file is held to before memplan
    plans the model (``bench.hf_check``): SpecError in one line naming the field."""
    to_dict = getattr(getattr(model, "config", None), "to_dict", None)
    if not callable(to_dict):
        return
    try:
        data = to_dict()
    except Exception:  # noqa: BLE001 - a config that cannot list itself is not checked here
        return
    if isinstance(data, dict):
        check_config(data, f"{type(model).__name__}.config")


def replan(captured: Captured, first: Plan, budget_bytes: int, *, compiled: bool = False) -> Plan:
    """The plan under another budget from ``first``'s calibration (a compiled plan is
    planned afresh, over the compiler's budgets)."""
    if first.compiler_budget is not None:
        return plan_model(captured, budget_bytes, compiled=compiled)

    return choose(
        first.profile,
        budget_bytes=budget_bytes,
        world_size=first.world_size,
        overheads=default_overheads(),
        layout=first.layout,
        accum=first.accum,
    )


def job_loss(output: Any, _batch: Any) -> torch.Tensor:
    """The step's loss as memplan should count it: the model's own (a scalar, or an output's
    ``loss``), else the mean of its first floating output, standing in for the loss the job
    computes outside the model (whose memory is the output's, already counted)."""
    from collections.abc import Mapping

    from torch.utils._pytree import tree_leaves

    if isinstance(output, torch.Tensor) and output.numel() == 1:
        return output
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.numel() == 1:
        return loss
    leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise Unplannable(f"the model's output ({type(output).__name__}) holds no floating tensor to take a loss of")
    return leaves[0].float().mean()


def unplanned_peak(plan: Plan) -> int | None:
    """The step's predicted peak with every block kept (what the job needs as it is)."""
    try:
        keep = [Choice.KEEP] * len(plan.choices)
        return peak_bytes(
            plan.profile, keep, world_size=plan.world_size, overheads=default_overheads(), layout=plan.layout, accum=plan.accum
        )
    except (AttributeError, TypeError, ValueError):
        return None


def apply_plan(model: nn.Module, plan: Plan) -> None:
    memplan.apply(model, plan)


def compile_blocks(model: nn.Module, plan: Plan | None = None) -> int:
    """Compile each repeated block in place (module names and state dict unchanged); a kept
    block of a compiled plan under the compiler budget it chose. Returns the blocks compiled."""
    found = blocks(model)
    if found is None:
        raise Unplannable(
            f"no repeated blocks found in {type(model).__qualname__} (a ModuleList or Sequential of two or more identical modules)"
        )
    budget = plan.compiler_budget if plan is not None else None
    for block in found:
        if budget is not None and budget < 1 and choice_of(block) is Choice.KEEP:
            _compile_in_place(block, backend=budget_backend(budget))
        else:
            _compile_in_place(block)
    return len(found)


def _compile_in_place(block: nn.Module, **options: Any) -> None:
    """``block.compile(**options)``, through a function of this file: torch.compile does not
    trace a frame of torch.nn itself, so ``block.compile()`` of a block whose forward is
    torch.nn's (a Sequential of Linear and GELU) compiles nothing; a call from here is traced
    and inlines the block's whole call (as torch.compile(block) does)."""
    call = block._call_impl

    def compiled_block(*args: Any, **kwargs: Any) -> Any:
        return call(*args, **kwargs)

    block._compiled_call_impl = torch.compile(compiled_block, **options)


def reason(exc: BaseException) -> str:
    """One line for why a plan could not be made."""
    if isinstance(exc, TrainstackError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}".splitlines()[0]

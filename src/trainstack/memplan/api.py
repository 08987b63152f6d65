"""The planner's one path: calibrate a model (fake tensors, then one real block per choice
where asked), then choose the plan of least recompute cost under a budget.

``plan`` is the entry point for any model (``wrappers.apply`` applies what it chose); ``decoder.plan_memory`` hands the bench decoder
to the same calibration (``calibrate_any_compiled``) and the same choice (``choose_plan``).
torch is imported only when these are called.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any

from trainstack.errors import BudgetError
from trainstack.memplan.blocks import find_blocks
from trainstack.memplan.budget import gpu_memory_bytes, parse_budget
from trainstack.memplan.calibration import calibrate_model
from trainstack.memplan.costs import Choice, Overheads, Plan, Profile
from trainstack.memplan.memory import with_measured_memory, with_measured_times
from trainstack.memplan.model_step import batch_rows, default_loss
from trainstack.memplan.offload import Placement, choose_with_offload
from trainstack.memplan.optim import optimizer_spec, precision_spec
from trainstack.memplan.overheads import default_overheads
from trainstack.memplan.planner import choose_over_budgets
from trainstack.memplan.realblock import measure_real
from trainstack.memplan.wrappers import reset_compiler
from trainstack.nn.versions import check_model_libraries

if TYPE_CHECKING:
    import torch
    from torch import nn

    from trainstack.memplan.blocks import BlockRun
    from trainstack.memplan.optim import PrecisionSpec

# The activation memory budgets a compiled plan may give its kept blocks: torch.compile's
# partitioner recomputes cheap ops inside a block until its saved bytes fit the fraction.
COMPILER_BUDGETS = (1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def calibrate_any(model: nn.Module, example_batch: object, **options: Any) -> Profile:
    """The calibration ``plan`` composes: fake tensors, then real blocks where ``measure``.
    ``options``: those of ``calibrate_any_compiled`` but ``compiled`` (optimizer, precision,
    blocks, loss_fn, device, measure, label, measure_on)."""
    return calibrate_any_compiled(model, example_batch, compiled=False, **options)[1.0]


def calibrate_any_compiled(
    model: nn.Module,
    example_batch: object,
    *,
    compiled: bool,
    optimizer: object = "adamw",
    precision: str | PrecisionSpec = "autocast-bf16",
    blocks: str | None = None,
    loss_fn: Callable | None = None,
    device: str | torch.device | None = None,
    measure: bool | None = None,
    label: str = "",
    measure_on: tuple[nn.Module, object] | None = None,
) -> dict[float, Profile]:
    """``calibrate_any``'s profile keyed by 1.0; where ``compiled`` and the blocks are
    measured on a CUDA GPU, the real blocks run under torch.compile and a kept block is also
    measured under each of ``COMPILER_BUDGETS``, one profile per budget.

    ``measure_on``: (a model, its batch) whose first block of the same list is the one
    measured for real, in place of ``model``'s own: a model built on the meta device (too
    large to build whole, as the bench decoder's presets) measured on a copy of a block or
    two. ``measure`` then defaults to measuring."""
    import torch

    check_model_libraries(model)
    run = find_blocks(model, blocks)
    opt, prec = optimizer_spec(optimizer), precision_spec(precision)
    params = next(iter(model.parameters()), None)
    on_cuda = params is not None and params.device.type == "cuda"
    if device is not None:
        dev = torch.device(device)
    elif params is not None and params.device.type != "meta":
        dev = params.device
    else:
        dev = torch.device("cuda" if cuda_available() else "cpu")
    loss = loss_fn or default_loss
    profile = calibrate_model(model, example_batch, run=run, optimizer=opt, precision=prec, device=dev, loss_fn=loss, label=label)
    if not (measure or (measure is None and (on_cuda or measure_on is not None))):
        return {1.0: profile}
    real_model, real_batch = measure_on if measure_on is not None else (model, example_batch)
    real_run = run if measure_on is None else replace(run, first=0, count=1)
    return measured_profiles(profile, real_model, real_batch, run=real_run, precision=prec, compiled=compiled)


def measured_profiles(
    profile: Profile,
    model: nn.Module,
    batch: object,
    *,
    run: BlockRun,
    precision: PrecisionSpec,
    compiled: bool,
    timed: bool = True,
    budgets: tuple[float, ...] | None = None,
) -> dict[float, Profile]:
    """``profile`` with the first block of ``run`` in ``model`` measured for real
    (``realblock.measure_real``): one profile per activation memory budget of the kept
    blocks (``budgets``);
    bytes on a CUDA device, times when ``timed``. Where the blocks do not fit: ``{1.0: profile}``.
    ``budgets``: default ``COMPILER_BUDGETS`` when ``compiled`` on a CUDA device, else 1.0 alone."""
    import torch

    if budgets is None:  # the compiler's budgets change a block's bytes, which the CUDA allocator measures
        on_cuda = next(model.parameters()).device.type == "cuda"
        budgets = COMPILER_BUDGETS if compiled and on_cuda else (1.0,)
    keep_budgets = tuple(b for b in budgets if b < 1)
    try:
        with compiled_graphs_allowed(len(budgets) + 2) if compiled else nullcontext():
            memory, seconds = measure_real(
                model, batch, run=run, precision=precision, compiled=compiled, keep_budgets=keep_budgets, timed=timed
            )
    except torch.OutOfMemoryError:
        return {1.0: profile}
    finally:
        reset_compiler(compiled)
        # the measurement's tensors are all freed now: give their segments back, so that
        # the training step planned here finds them (the planned peak leaves no room for them)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    # a budget the compiler could not partition under is measured by neither (measure_real warned)
    measured = memory if memory is not None else seconds
    return per_budget(profile, memory, seconds, tuple(b for b in budgets if b >= 1 or (measured is not None and b in measured)))


def per_budget(profile: Profile, memory: dict | None, seconds: dict | None, budgets: tuple[float, ...]) -> dict[float, Profile]:
    """One profile per activation memory budget of the kept blocks, from a real block's bytes
    and times measured per choice and per budget (keyed by the budget; 1.0 is the plain kept
    block); the selective and fully recomputed blocks are the same in each."""
    profiles = {}
    for budget in budgets:
        keep = Choice.KEEP if budget >= 1 else budget

        def per_choice(measured: dict, keep: Choice | float = keep) -> dict:
            return {Choice.KEEP: measured[keep], Choice.SELECTIVE: measured[Choice.SELECTIVE], Choice.FULL: measured[Choice.FULL]}

        p = with_measured_memory(profile, per_choice(memory)) if memory is not None else profile
        profiles[budget] = with_measured_times(p, per_choice(seconds)) if seconds is not None else p
    return profiles


def compiled_graphs_allowed(n: int) -> Any:
    """Let torch.compile keep ``n`` graphs of one forward (one per budget's backend) instead
    of falling back to eager past its recompile limit."""
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    return dynamo_config.patch({name: max(getattr(dynamo_config, name), n + 2)})


def choose_plan(
    profiles: dict[float, Profile],
    *,
    budget_bytes: int,
    world_size: int,
    overheads: Overheads | None,
    profile_at: Callable[[int], Profile],
    compiled: bool,
    placement: Placement | None = None,
) -> Plan:
    """The plan of least recompute cost over ``profiles`` (one per compiler budget) that fits
    ``budget_bytes``; ``profile_at(rows)`` calibrates another batch, for the error that says
    which batch would fit. An eager plan names no compiler budget. ``placement``: plan the
    sharding and offload it asks for (offload.choose_with_offload), the least estimated step
    time over the profiles winning."""
    if placement is not None:
        return _choose_placed(
            profiles, budget_bytes=budget_bytes, world_size=world_size, overheads=overheads, compiled=compiled, placement=placement
        )
    chosen = choose_over_budgets(
        profiles,
        budget_bytes=budget_bytes,
        world_size=world_size,
        overheads=overheads if overheads is not None else default_overheads(),
        profile_at=cache(profile_at),
    )
    return chosen if compiled else replace(chosen, compiler_budget=None)


def _choose_placed(
    profiles: dict[float, Profile], *, budget_bytes: int, world_size: int, overheads: Overheads | None, compiled: bool, placement: Placement
) -> Plan:
    plans, error = [], None
    for budget, profile in profiles.items():
        try:
            found = choose_with_offload(
                profile,
                budget_bytes=budget_bytes,
                host_budget_bytes=placement.host_budget_bytes,
                shard=placement.shard or ("fsdp2" if world_size > 1 else "none"),
                world_size=world_size,
                accum=placement.accum,
                rates=placement.rates,
                offload=placement.offload,
                ranks_per_host=placement.ranks_per_host,
                ladder=placement.ladder,
                overheads=overheads if overheads is not None else default_overheads(),
            )
        except BudgetError as exc:
            error = error or exc
            continue
        plans.append(replace(found, compiler_budget=budget if compiled else None))
    if not plans:
        raise error or ValueError("no profile to plan from")
    return min(plans, key=lambda p: (p.step_cost.total_s, p.peak_bytes, -(p.compiler_budget or 0.0)))


def plan(
    model: nn.Module,
    example_batch: object,
    *,
    budget: int | str,
    optimizer: object = "adamw",
    precision: str = "autocast-bf16",
    world_size: int = 1,
    blocks: str | None = None,
    loss_fn: Callable | None = None,
    device: str | torch.device | None = None,
    measure: bool | None = None,
    overheads: Overheads | None = None,
    label: str = "",
    compiled: bool = False,
    placement: Placement | None = None,
) -> Plan:
    """The plan of least recompute cost whose predicted peak fits ``budget`` (bytes, or a
    string such as "60GiB" or "0.9" of the GPU) for ``model`` training on ``example_batch``;
    see the package's docstring. ``compiled``: the blocks will run under torch.compile; measured
    on a CUDA GPU, compiled, the kept blocks also under each compiler activation memory
    budget, and the plan names the budget it chose (``plan.compiler_budget``)."""
    budget_bytes = budget if isinstance(budget, int) else parse_budget(str(budget), gpu_memory_bytes)
    kwargs: dict[str, Any] = dict(optimizer=optimizer, precision=precision, blocks=blocks, loss_fn=loss_fn, device=device, label=label)
    profiles = calibrate_any_compiled(model, example_batch, measure=measure, compiled=compiled, **kwargs)
    return choose_plan(
        profiles,
        budget_bytes=budget_bytes,
        world_size=world_size,
        overheads=overheads,
        profile_at=lambda rows: calibrate_any(model, batch_rows(example_batch, rows), measure=False, **kwargs),
        compiled=compiled,
        placement=placement,
    )

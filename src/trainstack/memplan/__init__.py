"""Memplan: predict the peak memory of a training step and choose what to recompute.

Any model::

    from trainstack import memplan

    plan = memplan.plan(model, example_batch, budget="60GiB")  # or bytes, or "0.9" of the GPU
    memplan.apply(model, plan)  # wraps the planned blocks in place; returns the model
    print(plan.summary(), plan.peak_bytes)

``plan(model, example_batch, *, budget, optimizer="adamw", precision="autocast-bf16",
world_size=1, blocks=None, loss_fn=None, device=None, measure=None, overheads=None)``:

- ``model``: the nn.Module as it will train (before FSDP and torch.compile); its repeated
  blocks are found (the longest run of identical modules in a ModuleList or Sequential,
  the one holding the most parameters), or named by ``blocks`` ("model.layers").
- ``example_batch``: what one step feeds it (a tensor, a tuple or a dict); its first
  dimension is the batch. The step is ``loss_fn(model(**batch | *batch | batch), batch)``;
  the default ``loss_fn`` takes the output itself when it is a scalar, else its ``loss``
  (a Hugging Face model given ``labels``).
- ``optimizer``: a name of ``memplan.optim.OPTIMIZERS`` (adamw, adamw-foreach, sgd,
  sgd-momentum, adafactor, adamw8bit, ...) or a torch optimizer; ``precision``:
  autocast-bf16 (weights as stored under bf16 autocast), bf16 (bf16 parameters, fp32
  master weights and state) or fp32; ``world_size``: GPUs the model is sharded over (FSDP).
- ``measure``: on a CUDA model, one real copy of a block per choice gives the blocks' bytes
  and recompute times (default: when the model's parameters are on a CUDA device).

Calibration runs on fake tensors, so it takes seconds and no memory whatever the size.
A model memplan cannot plan raises ``UnplannableModel`` (a SpecError) whose message says
why in one line; a budget nothing fits raises BudgetError (what is missing, and the batch
or sharding that would fit). The ``Plan`` says per block keep, selective or full
recompute (``plan.choices``, for the blocks at ``plan.blocks`` from ``plan.first_block``),
the predicted peak and its breakdown.

The bench decoder: ``plan_memory(cfg, batch=, seq=, budget_bytes=)`` calibrates a
``ModelConfig`` and can also plan compiled blocks. torch is imported only when these are
called.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING

from trainstack.memplan.plan import Breakdown, Choice, Overheads, Plan, Profile

if TYPE_CHECKING:
    from torch import nn

    from trainstack.nn.decoder import ModelConfig
    from trainstack.memplan.optim import PrecisionSpec

__all__ = [
    "COMPILER_BUDGETS",
    "Breakdown",
    "Choice",
    "Overheads",
    "Plan",
    "Profile",
    "UnplannableModel",
    "apply",
    "calibrate_any",
    "calibrate_any_compiled",
    "measure_compiled_blocks",
    "measure_real_block",
    "plan",
    "plan_memory",
]


# The activation memory budgets a compiled plan may give its kept blocks: torch.compile's
# partitioner recomputes cheap ops inside a block until its saved bytes fit the fraction.
COMPILER_BUDGETS = (1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0)


def plan_memory(
    cfg: ModelConfig,
    *,
    batch: int,
    seq: int,
    budget_bytes: int,
    world_size: int = 1,
    overheads: Overheads | None = None,
    device: str | None = None,
    time_blocks: bool | None = None,
    compiled: bool = False,
    precision: str = "autocast-bf16",
) -> Plan:
    """The plan of least recompute cost whose predicted peak fits ``budget_bytes``.

    Memory comes from fake-tensor calibration, the blocks' bytes from one real block per
    choice on a CUDA GPU. Recompute costs come from timing one real block per choice when
    ``time_blocks`` (default: when a CUDA GPU is present), else from a roofline with H200
    rates. ``compiled``: the blocks will run under torch.compile, so on a GPU they are
    measured compiled, and the kept blocks also under each of ``COMPILER_BUDGETS`` (the
    compiler's activation memory budget); the plan names the budget it chose. Raises
    BudgetError (how much is missing, and the batch or sharding that would fit).

    ``precision``: how the bench trains the blocks' weights, a name of
    ``memplan.optim.PRECISIONS``. The blocks are calibrated under bf16 autocast either way;
    ``bf16`` (bf16 parameters and gradients, AdamW on fp32 master copies) changes the
    weights', gradients' and optimizer state's bytes, and adds the master update's
    temporaries when it runs eagerly.
    """
    from trainstack.memplan.calibrate import calibrate
    from trainstack.memplan.optim import precision_spec
    from trainstack.memplan.overheads import default_overheads
    from trainstack.memplan.planner import choose_over_budgets

    spec = precision_spec(precision)

    def calibrated(b: int) -> Profile:
        return stored_as(calibrate(cfg, batch=b, seq=seq, device=device), spec, cfg, compiled=compiled)

    profile = calibrated(batch)
    profiles = {1.0: profile}
    if compiled and _cuda():
        profiles = measure_compiled_blocks(profile, cfg, batch=batch, seq=seq)
    elif time_blocks or (time_blocks is None and _cuda()):
        profiles = {1.0: measure_real_block(profile, cfg, batch=batch, seq=seq, compiled=compiled)}
    plan = choose_over_budgets(
        profiles,
        budget_bytes=budget_bytes,
        world_size=world_size,
        overheads=overheads if overheads is not None else default_overheads(),
        profile_at=cache(calibrated),
    )
    return plan if compiled else replace(plan, compiler_budget=None)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# The eager master update's temporaries of one parameter (bench.precision.adamw_update): the
# fp32 gradient, the square root, the denominator and the update, each of the parameter's size.
MASTER_UPDATE_TEMPORARIES = 4


def stored_as(profile: Profile, precision: PrecisionSpec, cfg: ModelConfig, *, compiled: bool) -> Profile:
    """``profile`` (calibrated with fp32 weights, gradients and AdamW state) for the bench's
    ``precision``: with bf16 parameters the weights and gradients take 2 bytes an element
    and AdamW keeps fp32 master weights beside its two fp32 moments; run eagerly, the master
    update makes ``MASTER_UPDATE_TEMPORARIES`` fp32 tensors of the largest parameter (the
    embedding or the output projection), compiled it is one fused kernel."""
    if precision.param_itemsize is None:
        return profile
    fp32_block, fp32_other = profile.block_param_bytes, profile.other_param_bytes
    block, other = fp32_block * precision.param_itemsize // 4, fp32_other * precision.param_itemsize // 4
    states = profile.optimizer_states + precision.master_itemsize // 4
    largest = 4 * cfg.vocab_size * cfg.dim
    return replace(
        profile,
        block_param_bytes=block,
        other_param_bytes=other,
        block_grad_bytes=block,
        other_grad_bytes=other,
        block_state_bytes=states * fp32_block,
        other_state_bytes=states * fp32_other,
        step_scratch=0 if compiled else MASTER_UPDATE_TEMPORARIES * largest,
        precision=precision.name,
    )


def measure_real_block(profile: Profile, cfg: ModelConfig, *, batch: int, seq: int, compiled: bool = False, timed: bool = True) -> Profile:
    """``profile`` with one real block per choice run where it will train: on a CUDA GPU its
    bytes from the allocator; when ``timed``, its recompute costs from timing it. The
    blocks are built (and compiled) once for both. Where they do not fit, ``profile``."""
    return _measured(profile, cfg, batch=batch, seq=seq, compiled=compiled, timed=timed, budgets=(1.0,)).get(1.0, profile)


def measure_compiled_blocks(profile: Profile, cfg: ModelConfig, *, batch: int, seq: int, budgets: tuple[float, ...] = COMPILER_BUDGETS) -> dict[float, Profile]:
    """One profile per activation memory budget of the kept blocks, all from real compiled
    blocks measured by the CUDA allocator and timed in one round robin (so their times
    compare); the selective and fully recomputed blocks are the same in each. Where the
    blocks do not fit: ``{1.0: profile}``."""
    return _measured(profile, cfg, batch=batch, seq=seq, compiled=True, timed=True, budgets=budgets)


def _measured(profile: Profile, cfg: ModelConfig, *, batch: int, seq: int, compiled: bool, timed: bool, budgets: tuple[float, ...]) -> dict[float, Profile]:
    import torch

    from trainstack.memplan.calibrate import block_memory, real_blocks, reset_compiler, time_block

    device = "cuda" if _cuda() else "cpu"
    blocks = None
    try:
        blocks = real_blocks(cfg, device=device, compiled=compiled, keep_budgets=tuple(b for b in budgets if b < 1))
        with _compiled_graphs_allowed(len(blocks)) if compiled else nullcontext():
            memory = block_memory(cfg, batch=batch, seq=seq, device=device, blocks=blocks) if device == "cuda" else None
            seconds = time_block(cfg, batch=batch, seq=seq, device=device, blocks=blocks) if timed else None
    except torch.OutOfMemoryError:
        return {1.0: profile}
    finally:
        del blocks
        reset_compiler(compiled)
        if device == "cuda":
            torch.cuda.empty_cache()
    return per_budget(profile, memory, seconds, budgets)


def per_budget(profile: Profile, memory: dict | None, seconds: dict | None, budgets: tuple[float, ...]) -> dict[float, Profile]:
    """One profile per activation memory budget of the kept blocks, from a real block's bytes
    and times measured per choice and per budget (keyed by the budget; 1.0 is the plain kept
    block); the selective and fully recomputed blocks are the same in each."""
    from trainstack.memplan.memory import with_measured_memory, with_measured_times

    profiles = {}
    for budget in budgets:
        keep = Choice.KEEP if budget >= 1 else budget

        def per_choice(measured: dict) -> dict:
            return {Choice.KEEP: measured[keep], Choice.SELECTIVE: measured[Choice.SELECTIVE], Choice.FULL: measured[Choice.FULL]}

        p = with_measured_memory(profile, per_choice(memory)) if memory is not None else profile
        profiles[budget] = with_measured_times(p, per_choice(seconds)) if seconds is not None else p
    return profiles


def _compiled_graphs_allowed(n: int):
    """Let torch.compile keep ``n`` graphs of one forward (one per budget's backend) instead
    of falling back to eager past its recompile limit."""
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    return dynamo_config.patch({name: max(getattr(dynamo_config, name), n + 2)})


def apply(model: nn.Module, plan: Plan) -> nn.Module:
    """Wrap the planned blocks of ``model`` per ``plan`` (keep, selective or full recompute
    each), in place; returns the model."""
    from trainstack.memplan.wrappers import apply as _apply

    return _apply(model, plan)


def __getattr__(name: str) -> object:
    if name == "UnplannableModel":
        from trainstack.memplan.anymodel import UnplannableModel

        return UnplannableModel
    raise AttributeError(name)


def calibrate_any(model: nn.Module, example_batch: object, **options: object) -> Profile:
    """The calibration ``plan`` composes: fake tensors, then real blocks where ``measure``.
    ``options``: those of ``calibrate_any_compiled`` but ``compiled`` (optimizer, precision,
    blocks, loss_fn, device, measure, label)."""
    return calibrate_any_compiled(model, example_batch, compiled=False, **options)[1.0]


def calibrate_any_compiled(
    model: nn.Module,
    example_batch: object,
    *,
    compiled: bool,
    optimizer: object = "adamw",
    precision: str = "autocast-bf16",
    blocks: str | None = None,
    loss_fn: Callable | None = None,
    device: object = None,
    measure: bool | None = None,
    label: str = "",
) -> dict[float, Profile]:
    """``calibrate_any``'s profile keyed by 1.0; where ``compiled`` and the blocks are
    measured on a CUDA GPU, the real blocks run under torch.compile and a kept block is also
    measured under each of ``COMPILER_BUDGETS``, one profile per budget."""
    import torch

    from trainstack.memplan.anymodel import calibrate_model, default_loss, find_blocks
    from trainstack.memplan.calibrate import reset_compiler
    from trainstack.memplan.optim import optimizer_spec, precision_spec
    from trainstack.memplan.realblock import measure_real
    from trainstack.nn.versions import check_model_libraries

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
        dev = torch.device("cuda" if _cuda() else "cpu")
    loss = loss_fn or default_loss
    profile = calibrate_model(model, example_batch, run=run, optimizer=opt, precision=prec, device=dev, loss_fn=loss, label=label)
    if not (measure or (measure is None and on_cuda)):
        return {1.0: profile}
    budgets = COMPILER_BUDGETS if compiled else (1.0,)
    keep_budgets = tuple(b for b in budgets if b < 1)
    try:
        with _compiled_graphs_allowed(len(budgets) + 2) if compiled else nullcontext():
            memory, seconds = measure_real(model, example_batch, run=run, precision=prec, compiled=compiled, keep_budgets=keep_budgets)
    except torch.OutOfMemoryError:
        return {1.0: profile}
    finally:
        reset_compiler(compiled)
        # the measurement's tensors are all freed now: give their segments back, so that
        # the training step planned here finds them (the planned peak leaves no room for them)
        torch.cuda.empty_cache()
    # a budget the compiler could not partition under is not in memory (measure_real warned)
    return per_budget(profile, memory, seconds, tuple(b for b in budgets if b >= 1 or b in memory))


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
    device: object = None,
    measure: bool | None = None,
    overheads: Overheads | None = None,
    label: str = "",
    compiled: bool = False,
) -> Plan:
    """The plan of least recompute cost whose predicted peak fits ``budget`` (bytes, or a
    string such as "60GiB" or "0.9" of the GPU) for ``model`` training on ``example_batch``;
    see the module docstring. ``compiled``: the blocks will run under torch.compile; measured
    on a CUDA GPU, compiled, the kept blocks also under each compiler activation memory
    budget, and the plan names the budget it chose (``plan.compiler_budget``)."""
    from trainstack.memplan.anymodel import batch_rows
    from trainstack.memplan.budget import gpu_memory_bytes, parse_budget
    from trainstack.memplan.overheads import default_overheads
    from trainstack.memplan.planner import choose_over_budgets

    budget_bytes = budget if isinstance(budget, int) else parse_budget(str(budget), gpu_memory_bytes)
    kwargs = dict(optimizer=optimizer, precision=precision, blocks=blocks, loss_fn=loss_fn, device=device, label=label)
    profiles = calibrate_any_compiled(model, example_batch, measure=measure, compiled=compiled, **kwargs)
    chosen = choose_over_budgets(
        profiles,
        budget_bytes=budget_bytes,
        world_size=world_size,
        overheads=overheads if overheads is not None else default_overheads(),
        profile_at=cache(lambda rows: calibrate_any(model, batch_rows(example_batch, rows), measure=False, **kwargs)),
    )
    return chosen if compiled else replace(chosen, compiler_budget=None)

"""Memplan: predict the peak memory of a training step and choose what to recompute.

``plan_memory(cfg, batch=, seq=, budget_bytes=)`` calibrates the model on fake tensors and
returns the cheapest ``Plan`` that fits; ``apply(model, plan)`` wraps the blocks. torch is
imported only when these are called.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from trainstack.memplan.plan import Breakdown, Choice, Overheads, Plan, Profile

if TYPE_CHECKING:
    from torch import nn

    from trainstack.bench.model import ModelConfig

__all__ = ["Breakdown", "Choice", "Overheads", "Plan", "Profile", "apply", "measure_real_block", "plan_memory"]


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
) -> Plan:
    """The plan of least recompute cost whose predicted peak fits ``budget_bytes``.

    Memory comes from fake-tensor calibration, the blocks' bytes from one real block per
    choice on a CUDA GPU. Recompute costs come from timing one real block per choice when
    ``time_blocks`` (default: when a CUDA GPU is present), else from a roofline with H200
    rates. ``compiled``: the blocks will run under torch.compile, so on a GPU they are
    measured compiled (the compiler saves less and recomputes faster). Raises BudgetError
    (how much is missing, and the batch or sharding that would fit).
    """
    from trainstack.memplan.calibrate import calibrate
    from trainstack.memplan.overheads import default_overheads
    from trainstack.memplan.planner import choose

    profile = calibrate(cfg, batch=batch, seq=seq, device=device)
    if time_blocks or (time_blocks is None and _cuda()):
        profile = measure_real_block(profile, cfg, batch=batch, seq=seq, compiled=compiled)
    return choose(
        profile,
        budget_bytes=budget_bytes,
        world_size=world_size,
        overheads=overheads if overheads is not None else default_overheads(),
        profile_at=cache(lambda b: calibrate(cfg, batch=b, seq=seq, device=device)),
    )


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def measure_real_block(profile: Profile, cfg: ModelConfig, *, batch: int, seq: int, compiled: bool = False, timed: bool = True) -> Profile:
    """``profile`` with one real block per choice run where it will train: on a CUDA GPU its
    bytes from the allocator; when ``timed``, its recompute costs from timing it. The
    blocks are built (and compiled) once for both. Where they do not fit, ``profile``."""
    import torch

    from trainstack.memplan.calibrate import block_memory, real_blocks, reset_compiler, time_block
    from trainstack.memplan.memory import with_measured_memory, with_measured_times

    device = "cuda" if _cuda() else "cpu"
    blocks = None
    try:
        blocks = real_blocks(cfg, device=device, compiled=compiled)
        if device == "cuda":
            profile = with_measured_memory(profile, block_memory(cfg, batch=batch, seq=seq, device=device, blocks=blocks))
        if timed:
            profile = with_measured_times(profile, time_block(cfg, batch=batch, seq=seq, device=device, blocks=blocks))
        return profile
    except torch.OutOfMemoryError:
        return profile
    finally:
        del blocks
        reset_compiler(compiled)
        if device == "cuda":
            torch.cuda.empty_cache()


def apply(model: nn.Module, plan: Plan) -> nn.Module:
    """Wrap ``model.layers`` per ``plan``: keep, selective or full recompute for each block."""
    from trainstack.memplan.wrappers import apply as _apply

    return _apply(model, plan)

"""The plan fitted to the budget by measurement, in the job's own process.

memplan predicts a step's reserved peak; what the job really reserves also holds what its
prediction cannot see (the job's own loss, library workspaces, what the allocator keeps).
So on a CUDA GPU the planned model takes one probe step (forward and backward of the first
batch, with the optimizer's state and its step's scratch stood in for by memplan's own
figures while they do not exist yet) before the job's first step, measured by the
allocator. The probe runs where the job's first call of the model was caught, inside that
call's context (its autocast, its grad mode). Where the probe needs more than the budget,
the measured error (need minus prediction) comes off the budget and memplan plans again,
for a few rounds. The probe leaves the job as it found it: gradients, buffers and random
state restored, the allocator's cache emptied, its cap on the process put back and its peak
statistics reset.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainstack.errors import BudgetError
from trainstack.memplan import Plan
from trainstack.memplan.model_step import call_model
from trainstack.run.capture import Captured
from trainstack.run.memview import gib
from trainstack.run.planning import memory_fraction

ROUNDS = 3
_ASKED = re.compile(r"Tried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@dataclass(frozen=True)
class Measured:
    """A probe step's need: the allocator's reserved peak; where the step ran out of memory
    (``complete`` False), what it had allocated plus what it asked for, a lower bound."""

    need: int
    complete: bool = True


@dataclass(frozen=True)
class Fitted:
    plan: Plan  # the plan to apply: the one that fitted, else the last planned
    rounds: tuple[tuple[Plan, Measured], ...]  # each plan probed, in order
    fits: bool  # the last probe's need is within the budget
    why_not: str | None = None  # where a corrected budget fits no plan: memplan's reason


def fit(first: Plan, target: int, *, replan: Callable[[int], Plan], probe: Callable[[Plan], Measured], rounds: int = ROUNDS) -> Fitted:
    """Probe ``first``; while the measured need exceeds ``target``, plan again under
    ``target`` less the measured error of the plan probed (at least 1 byte below that
    plan's predicted peak, so that every round recomputes more), and probe that. After
    ``rounds`` probes over the budget, the plan is the last one planned (not probed: the
    best the measurements say); where no plan fits a corrected budget, the last probed."""
    plan, tried = first, []
    for _ in range(rounds):
        measured = probe(plan)
        tried.append((plan, measured))
        if measured.complete and measured.need <= target:
            return Fitted(plan, tuple(tried), True)
        error = max(measured.need - plan.peak_bytes, 0)
        try:
            plan = replan(min(target - error, plan.peak_bytes - 1))
        except BudgetError as exc:
            return Fitted(tried[-1][0], tuple(tried), False, str(exc))
    return Fitted(plan, tuple(tried), False)


def asked_bytes(error: BaseException) -> int:
    """The allocation an out-of-memory error names (torch's message); 0 where it names none."""
    m = _ASKED.search(str(error))
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else 0


def can_probe(captured: Captured) -> str | None:
    """None where the probe can run; else why not, in a few words."""
    import torch

    params = next(iter(captured.model.parameters()), None)
    if params is None or params.device.type != "cuda":
        return "the model is not on a CUDA GPU"
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return "a probe step would run the distributed job's gradient hooks"
    if any(p.grad is not None for p in captured.model.parameters()):
        return "the job holds gradients before its first step"
    return None


def probe_step(captured: Captured, plan: Plan, batch: Any, loss_fn: Callable[[Any, Any], Any]) -> Measured:
    """Forward and backward of the planned model on ``batch``, with the optimizer's predicted
    state held where the optimizer has none yet and its step's predicted scratch held after
    the backward (the optimizer phase, with every gradient live); the allocator's reserved
    peak. The job's cap on its process's memory is lifted while the probe runs, so the whole
    need is seen, not an out-of-memory error at the cap."""
    import gc

    import torch

    model = captured.model
    device = next(model.parameters()).device
    optimizer = captured.optimizer
    state_bytes = plan.breakdown.optimizer if optimizer is None or not optimizer.state else 0
    scratch_bytes = getattr(plan.profile, "step_scratch", 0) or 0
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    cap = _lift_cap(device)
    measured = None
    try:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            state = torch.empty(state_bytes, dtype=torch.uint8, device=device)
            try:
                loss = loss_fn(call_model(model, batch), batch)
                loss.backward()
                del loss
                scratch = torch.empty(scratch_bytes, dtype=torch.uint8, device=device)
                del scratch
                torch.cuda.synchronize(device)
                measured = Measured(torch.cuda.max_memory_reserved(device))
            except torch.OutOfMemoryError as exc:
                # read while the failed step's tensors are alive (its traceback holds them)
                measured = Measured(torch.cuda.memory_allocated(device) + asked_bytes(exc), complete=False)
            finally:
                del state
    finally:
        for p in model.parameters():
            p.grad = None
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        buffers.clear()
        gc.collect()  # a failed step's frames, where a cycle holds them
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()  # before the cap is put back: what the probe reserved goes
        _restore_cap(device, cap)
        torch.cuda.reset_peak_memory_stats(device)  # the job's statistics start with its own steps
    return measured


def _lift_cap(device: Any) -> float | None:
    import torch

    fraction = memory_fraction(device)
    if fraction is not None and fraction < 1:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        return fraction
    return None


def _restore_cap(device: Any, fraction: float | None) -> None:
    import torch

    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction, device)


def describe(fitted: Fitted) -> str:
    """One clause: what the probes measured and what planning again did."""
    parts = []
    for i, (plan, measured) in enumerate(fitted.rounds):
        need = f"{gib(measured.need)}" if measured.complete else f"over {gib(measured.need)} (ran out of memory)"
        parts.append(f"{'probe' if i == 0 else 'then'} {plan.summary()} predicted {gib(plan.peak_bytes)} measured {need}")
    text = "; ".join(parts)
    if fitted.why_not:
        text += f"; no plan fits the corrected budget: {fitted.why_not}"
    elif not fitted.fits:
        text += f"; still over after {len(fitted.rounds)} probes: {fitted.plan.summary()} predicted {gib(fitted.plan.peak_bytes)} under the corrected budget, not probed"
    return text

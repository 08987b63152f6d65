"""The in-process side of ``trainstack run``: what the variables ask for, set up in the job.

``activate()`` runs at interpreter start (from the sitecustomize of ``trainstack run`` or
the ``.pth`` file a venv build installs) in every process of the job. It never raises
into the job: a bad variable is one line on stderr and the job runs as it would without.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
from dataclasses import replace

from trainstack.errors import TrainstackError
from trainstack.run.settings import Settings, from_env, rank

_active: dict[str, object] = {}  # what this process set up, for tests and benchmarks


def activate() -> None:
    try:
        settings = from_env(os.environ)
    except TrainstackError as exc:
        warn(f"hook off: {exc}")
        return
    try:
        this_rank = rank(os.environ)
    except TrainstackError as exc:
        warn(f"{exc}; rank 0 is used for this process's file names")
        this_rank = 0
    if settings.active:
        try:
            setup(settings, this_rank)
        except Exception as exc:  # noqa: BLE001 - the hook never raises into the job
            warn(f"hook off: could not set up ({type(exc).__name__}: {exc})")


def warn(text: str) -> None:
    """One line on stderr: its first line, at most 300 characters, control characters escaped."""
    line = (text.splitlines() or [""])[0][:300]
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    try:
        print(f"trainstack run: {shown}", file=sys.stderr)
    except (OSError, ValueError):
        # no stderr to write to: the job goes on regardless
        return


def setup(settings: Settings, this_rank: int) -> None:
    importlib.import_module("torch")  # the job imports it anyway; the hooks need it now

    if settings.profiling:
        from trainstack.run.profiling import StepProfiler

        profiler = StepProfiler(settings, this_rank)
        profiler.install()
        atexit.register(profiler.close)
        _active["profiler"] = profiler
    recorder = None
    if settings.oom_dir is not None:
        from trainstack.run.oom import OomRecorder

        recorder = OomRecorder(settings.oom_dir, settings.oom_entries, this_rank)
        recorder.install()
        _active["oom"] = recorder
    if settings.needs_model:
        from trainstack.run.capture import capture_model

        capture_model(lambda captured: on_model(captured, settings, recorder))


def on_model(captured, settings: Settings, recorder) -> None:  # torch types imported late
    try:
        _on_model(captured, settings, recorder)
    except Exception as exc:  # noqa: BLE001 - the hook never raises into the job
        warn(f"the model hook stopped ({type(exc).__name__}: {exc}); the model runs as the job built it")


def _on_model(captured, settings: Settings, recorder) -> None:
    from trainstack.run import planning

    if recorder is not None:
        recorder.captured = replace(captured, args=_meta(captured.args), kwargs=_meta(captured.kwargs))
    plan = None
    if settings.memplan is not None:
        plan = _plan(captured, settings, recorder)
    if settings.compile:
        try:
            n = planning.compile_blocks(captured.model, plan)
            print(f"trainstack run: compiled {n} blocks of {type(captured.model).__qualname__}", file=sys.stderr)
        except planning.Unplannable as exc:
            print(f"trainstack run: --compile: {exc}; the model runs as the job built it", file=sys.stderr)
    _active["captured"] = captured.model


def _plan(captured, settings: Settings, recorder=None):
    """Plan and apply; on a CUDA GPU the plan is fitted to the budget by a measured probe
    step (``fitting``). A model memplan cannot plan, or a budget nothing fits, is reported
    and the job runs as it was built (its own OOM then says the rest)."""
    from trainstack.run import planning

    try:
        budget = planning.parse(settings.memplan or "", "TRAINSTACK_MEMPLAN")
        target = min(budget, planning.usable_bytes() or budget)
        plan = planning.plan_model(captured, target, compiled=settings.compile)
    except (TrainstackError, planning.Unplannable) as exc:
        print(f"trainstack run: memplan: {planning.reason(exc)}; the model runs as the job built it", file=sys.stderr)
        return None
    _release_planning_cache()
    planning.apply_plan(captured.model, plan)
    measured = _fit(captured, plan, target, settings, recorder)
    plan = measured[0] if measured else plan
    _active["plan"] = plan
    line = f"trainstack run: memplan for {settings.memplan}: {plan.summary()}, predicted peak {plan.peak_bytes / 2**30:.2f} GiB"
    if plan.layout is not None and plan.layout.world_size > 1:
        line += f" per rank ({plan.layout.name()})"
    if target < budget:
        line += f" (planned for {target / 2**30:.2f} GiB, what the job may use)"
    if measured:
        line += f"; {measured[1]}"
    print(f"{line}{_allocator_note()}", file=sys.stderr)
    return plan


def _fit(captured, plan, target: int, settings: Settings, recorder):
    """(the fitted plan, applied; what the probes measured), or None where no probe runs
    (``plan`` stays applied). A probe that fails for any reason but memory leaves ``plan``."""
    from trainstack.run import fitting, planning

    why_not = fitting.can_probe(captured)
    if why_not is None and settings.compile:
        why_not = "the blocks will be compiled, and an eager probe does not measure the compiled step"
    if why_not is not None:
        if why_not != "the model is not on a CUDA GPU":
            print(f"trainstack run: memplan: no probe step ({why_not}); the plan is as predicted", file=sys.stderr)
        return None
    batch = planning.batch_of(captured)

    def probe(candidate):
        planning.apply_plan(captured.model, candidate)
        return fitting.probe_step(captured, candidate, batch, planning.job_loss)

    if recorder is not None:
        recorder.paused = True  # a probe that runs out of memory is not the job's OOM
    try:
        fitted = fitting.fit(plan, target, replan=lambda b: planning.replan(captured, plan, b, compiled=settings.compile), probe=probe)
    except Exception as exc:  # noqa: BLE001 - the hook never raises into the job
        planning.apply_plan(captured.model, plan)
        print(f"trainstack run: memplan: the probe step failed ({planning.reason(exc)}); the plan is as predicted", file=sys.stderr)
        return None
    finally:
        if recorder is not None:
            recorder.paused = False
    planning.apply_plan(captured.model, fitted.plan)
    return fitted.plan, fitting.describe(fitted)


def _allocator_note() -> str:
    import os

    conf = os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or ""
    return f" (allocator: {conf})" if conf else ""


def _release_planning_cache() -> None:
    """memplan measured real blocks in the job's process: give their cached segments back
    before the probe and the first step."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _meta(tree):
    """The batch's tensors as meta tensors: shapes for the diagnosis, no memory held."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: torch.empty_like(t, device="meta") if isinstance(t, torch.Tensor) else t, tree)

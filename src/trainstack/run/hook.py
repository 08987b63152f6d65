"""The in-process side of ``trainstack run``: what the variables ask for, set up in the job.

``activate()`` runs at interpreter start (from the sitecustomize of ``trainstack run`` or
the ``.pth`` file a venv build installs) in every process of the job. It never raises
into the job: a bad variable is one line on stderr and the job runs as it would without.
"""

from __future__ import annotations

import atexit
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
        print(f"trainstack run: hook off: {exc}", file=sys.stderr)
        return
    if settings.active:
        setup(settings, rank(os.environ))


def setup(settings: Settings, this_rank: int) -> None:
    import torch  # noqa: F401  (the job imports it anyway; the hooks need it now)

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


def on_model(captured, settings: Settings, recorder) -> None:  # noqa: ANN001 - torch types imported late
    from trainstack.run import planning

    if recorder is not None:
        recorder.captured = replace(captured, args=_meta(captured.args), kwargs=_meta(captured.kwargs))
    plan = None
    if settings.memplan is not None:
        plan = _plan(captured, settings)
    if settings.compile:
        try:
            n = planning.compile_blocks(captured.model, plan)
            print(f"trainstack run: compiled {n} blocks of {type(captured.model).__qualname__}", file=sys.stderr)
        except planning.Unplannable as exc:
            print(f"trainstack run: --compile: {exc}; the model runs as the job built it", file=sys.stderr)
    _active["captured"] = captured.model


def _plan(captured, settings: Settings):  # noqa: ANN001, ANN202
    """Plan and apply; a model memplan cannot plan, or a budget nothing fits, is reported
    and the job runs as it was built (its own OOM then says the rest)."""
    from trainstack.run import planning

    try:
        budget = planning.parse(settings.memplan or "", "TRAINSTACK_MEMPLAN")
        plan = planning.plan_model(captured, budget, compiled=settings.compile)
    except (TrainstackError, planning.Unplannable) as exc:
        print(f"trainstack run: memplan: {planning.reason(exc)}; the model runs as the job built it", file=sys.stderr)
        return None
    planning.apply_plan(captured.model, plan)
    _release_planning_cache()
    _active["plan"] = plan
    print(f"trainstack run: memplan for {settings.memplan}: {plan.summary()}, predicted peak {plan.peak_bytes / 2**30:.2f} GiB", file=sys.stderr)
    return plan


def _release_planning_cache() -> None:
    """memplan measured real blocks in the job's process: give their cached segments back
    before the first step (on the H200 a planned job capped at its budget ran out of memory
    with 2.03 GiB reserved but unallocated after planning, 83 MiB without it)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _meta(tree):  # noqa: ANN001, ANN202
    """The batch's tensors as meta tensors: shapes for the diagnosis, no memory held."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: torch.empty_like(t, device="meta") if isinstance(t, torch.Tensor) else t, tree)

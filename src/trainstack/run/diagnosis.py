"""One paragraph on an OOM: what was allocated, what was asked, and what memplan would do."""

from __future__ import annotations

from trainstack.run.memview import Summary, gib

GiB = 2**30


def suggest_budget(usable: int) -> str:
    """A budget to pass back as ``--memplan``: the usable memory, rounded down to 0.01 GiB."""
    return f"{int(usable / GiB * 100) / 100:.2f}GiB"


def paragraph(summary: Summary, *, usable: int | None, batch: str | None, planned: str | None, why_not: str | None) -> str:
    """``planned``: memplan's finding at the usable memory; ``why_not``: why there is none."""
    top = summary.stacks[0] if summary.stacks else None
    text = (
        f"The job ran out of memory on cuda:{summary.device}"
        + (f" asking for {gib(summary.requested)}" if summary.requested is not None else "")
        + f" with {gib(summary.allocated)} allocated"
        + (f" of {gib(usable)} it may use" if usable is not None else "")
        + "."
    )
    if top is not None:
        job_frame = next((f for f in top.frames[1:] if "-packages/" not in f), top.frames[-1])  # the job's own file, where shown
        called = f" (called from {job_frame})" if len(top.frames) > 1 else ""
        text += f" The largest live allocations ({gib(top.total)} in {top.count} blocks) were made at {top.frames[0]}{called}."
    if planned is not None:
        text += f" memplan{f' at batch {batch}' if batch else ''}: {planned}"
    elif why_not is not None:
        text += f" memplan could not plan the model: {why_not}."
    return text


def planned_sentence(*, needs: int | None, fits: str, peak: int, budget: str) -> str:
    """``needs``: the unplanned peak; ``fits``: the plan's summary; ``budget``: as the user writes it."""
    need = f"the step needs {gib(needs)} with every block kept; " if needs is not None else ""
    return f"{need}recomputing as planned ({fits}) fits, predicted peak {gib(peak)}: rerun with `trainstack run --memplan {budget} -- ...` (or TRAINSTACK_MEMPLAN={budget})."


def fits_as_is(*, peak: int, usable: int) -> str:
    """memplan finds the step fits with no recompute: the memory went elsewhere."""
    return (
        f"the step fits {gib(usable)} with no recompute (predicted peak {gib(peak)}), so what ran out is not the model's "
        "training step as memplan sees it: look at the largest allocations below."
    )

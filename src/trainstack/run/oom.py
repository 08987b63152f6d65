"""OOM snapshots: the allocator's history in a bounded ring, dumped when an allocation fails.

Recording starts when the job first initialises CUDA (so no process touches a GPU it would
not have). At the first out-of-memory the allocator's observer dumps the snapshot pickle;
when the process ends (after the job's own error was printed, exit code unchanged) the
HTML view and the diagnosis are written next to it.
"""

from __future__ import annotations

import atexit
import gc
import pickle
import sys
from pathlib import Path
from typing import Any

import torch

from trainstack.errors import BudgetError
from trainstack.fsutil import atomic_write_bytes, atomic_write_text
from trainstack.memplan import Choice
from trainstack.run import diagnosis, memview, planning
from trainstack.run.capture import Captured


class OomRecorder:
    def __init__(self, folder: Path, entries: int, rank: int) -> None:
        self.folder = folder
        self.entries = entries
        self.rank = rank
        self.snapshot: dict[str, Any] | None = None
        self.captured: Captured | None = None  # the job's model, for the diagnosis
        self.paused = False  # while trainstack's own probe step runs

    @property
    def stem(self) -> Path:
        return self.folder / f"oom-rank{self.rank}"

    def install(self) -> None:
        if not torch.cuda.is_available():
            return  # no allocator to record: nothing happens on a CPU
        torch.cuda._lazy_call(self._start)
        atexit.register(self.report)

    def _start(self) -> None:
        torch.cuda.memory._record_memory_history(max_entries=self.entries)
        torch._C._cuda_attach_out_of_memory_observer(self.on_oom)  # type: ignore[attr-defined]  # torch's private hook, absent from its stubs

    def on_oom(self, device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        """At the failing allocation, before the error is raised: keep the first snapshot."""
        if self.snapshot is not None or self.paused:
            return
        self.snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)  # what follows is not the job's step
        try:
            atomic_write_bytes(self.stem.with_suffix(".pickle"), pickle.dumps(self.snapshot))
        except OSError as exc:
            print(f"trainstack run: could not write the OOM snapshot to {self.folder}: {exc}", file=sys.stderr)

    def report(self) -> None:
        """The HTML view and the diagnosis, once the job is over."""
        if self.snapshot is None:
            return
        _release_failed_step()
        text = self.diagnose()
        summary = memview.summarize(self.snapshot)
        try:
            atomic_write_text(self.stem.with_suffix(".html"), memview.render_html(summary, text, title=f"Out of memory, rank {self.rank}"))
            atomic_write_text(self.stem.with_suffix(".txt"), text + "\n")
        except OSError as exc:
            print(f"trainstack run: could not write the OOM view to {self.folder}: {exc}", file=sys.stderr)
            return
        print(
            f"trainstack run: rank {self.rank}: {text}\ntrainstack run: snapshot and view: {self.stem}.pickle, {self.stem}.html",
            file=sys.stderr,
        )

    def diagnose(self) -> str:
        assert self.snapshot is not None
        summary = memview.summarize(self.snapshot)

        usable = planning.usable_bytes()
        return diagnose_with(summary, self.captured, usable)


def diagnose_with(summary: memview.Summary, captured: Captured | None, usable: int | None) -> str:
    if captured is None:
        return diagnosis.paragraph(
            summary, usable=usable, batch=None, planned=None, why_not="the job's model was not seen (no module called in training mode)"
        )
    batch = _batch_text(captured)
    if usable is None:
        return diagnosis.paragraph(summary, usable=None, batch=batch, planned=None, why_not="no GPU memory size to plan for")
    budget = diagnosis.suggest_budget(usable)
    try:
        plan = planning.plan_model(captured, planning.parse(budget, "budget"))
    except BudgetError as exc:
        return diagnosis.paragraph(summary, usable=usable, batch=batch, planned=f"no recompute plan fits {budget}: {exc}.", why_not=None)
    except Exception as exc:  # noqa: BLE001 - any failure of the planner is reported, never raised at exit
        return diagnosis.paragraph(summary, usable=usable, batch=batch, planned=None, why_not=planning.reason(exc))
    if all(c is Choice.KEEP for c in plan.choices):
        sentence = diagnosis.fits_as_is(peak=plan.peak_bytes, usable=usable)
    else:
        sentence = diagnosis.planned_sentence(needs=planning.unplanned_peak(plan), fits=plan.summary(), peak=plan.peak_bytes, budget=budget)
    return diagnosis.paragraph(summary, usable=usable, batch=batch, planned=sentence, why_not=None)


def _batch_text(captured: Captured) -> str | None:
    tensors = [a for a in (*captured.args, *captured.kwargs.values()) if isinstance(a, torch.Tensor)]
    return "x".join(str(d) for d in tensors[0].shape) if tensors else None


def _release_failed_step() -> None:
    """The failed step's tensors live on in the printed traceback; the process is ending, so
    let them go before memplan measures."""
    for name in ("last_exc", "last_value", "last_traceback"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    torch.cuda.empty_cache()

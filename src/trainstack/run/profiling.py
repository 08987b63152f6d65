"""On-demand profiling of a running job: torch.profiler over N optimizer steps on a trigger.

Steps are counted by a global optimizer step hook, so the job's loop is not touched. A
trigger is a step range, a signal, or the file ``profile`` touched in the control folder
(each touch profiles once; the signal touches it too, so every rank of a torchrun job
starts at its next step). Each rank writes its own Chrome trace and kernel table through
the bench's profile writer.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
from pathlib import Path

import torch

from trainstack.bench.profile import write_profile
from trainstack.run.settings import TRIGGER_FILE, Settings


def _mtime(path: Path | None) -> float | None:
    """When the trigger file was last touched; None when missing or not a regular file (a link is never followed)."""
    try:
        found = os.lstat(path) if path is not None else None
    except OSError:
        return None
    return found.st_mtime_ns if found is not None and stat.S_ISREG(found.st_mode) else None


def touch_trigger(path: Path) -> None:
    """Create or touch the trigger file without following a link planted at its name (nor
    blocking on a FIFO planted there): OSError when something else stands there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.utime(fd)
    finally:
        os.close(fd)


class StepProfiler:
    """Counts the job's optimizer steps and profiles the ones a trigger asks for."""

    def __init__(self, settings: Settings, rank: int) -> None:
        assert settings.profile_dir is not None
        self.settings = settings
        self.rank = rank
        self.step = 0  # optimizer steps finished
        self.optimizer_id: int | None = None  # steps of the first optimizer that steps are counted
        self.trigger = settings.control_dir / TRIGGER_FILE if settings.control_dir is not None else None
        self.seen = _mtime(self.trigger)
        self.pending = False  # a signal arrived
        self.prof: torch.profiler.profile | None = None
        self.started_at = 0
        self.remaining = 0
        self.written: list[dict[str, str]] = []
        self.broken = False

    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self.after_step)
        if self.settings.profile_signal is not None:
            signal.signal(self.settings.profile_signal, self.on_signal)

    def on_signal(self, signum: int, frame: object) -> None:
        """Profile from this process's next step; the touched file tells the other ranks."""
        self.pending = True
        if self.trigger is not None:
            try:
                touch_trigger(self.trigger)
            except OSError as exc:
                print(f"trainstack run: the trigger file was not touched: {exc}", file=sys.stderr)

    def after_step(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        """After each optimizer step; never raises into the job (a failure turns profiling off)."""
        if self.broken:
            return
        try:
            self._after_step(optimizer)
        except Exception as exc:  # noqa: BLE001 - the hook never raises into the job
            self.broken = True
            print(
                f"trainstack run: profiling off: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
                file=sys.stderr,
            )

    def _after_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.optimizer_id is None:
            self.optimizer_id = id(optimizer)
        elif id(optimizer) != self.optimizer_id:
            return
        self.step += 1
        if self.prof is not None:
            self.remaining -= 1
            if self.remaining == 0:
                self._finish()
            return
        count = self._triggered()
        if count:
            self._start(count)

    def close(self) -> None:
        """At exit: a job that ends inside a profiled range still gets the steps it ran."""
        if self.prof is not None and self.step > self.started_at:
            self._finish()

    def _triggered(self) -> int:
        """Steps to profile from now on; 0: nothing asked."""
        asked = 0
        steps = self.settings.profile_steps
        if steps is not None and steps[0] <= self.step < steps[1]:
            asked = steps[1] - self.step
        mtime = _mtime(self.trigger)
        if mtime != self.seen:
            self.seen = mtime
            asked = asked or (self.settings.profile_count if mtime is not None else 0)
        if self.pending:
            self.pending = False
            asked = asked or self.settings.profile_count
        return asked

    def _start(self, count: int) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(activities=activities)
        self.prof.start()
        self.started_at = self.step
        self.remaining = count

    def _finish(self) -> None:
        prof, self.prof = self.prof, None
        assert prof is not None
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            torch.cuda.synchronize()
        prof.stop()
        n = self.step - self.started_at
        assert self.settings.profile_dir is not None  # profiling is armed only with a folder (settings.from_env)
        stem = self.settings.profile_dir / f"steps{self.started_at}-{self.step - 1}-rank{self.rank}"
        try:
            paths = write_profile(prof, n, stem, cuda=cuda)
        except OSError as exc:
            print(f"trainstack run: rank {self.rank}: could not write the profile to {stem}: {exc}", file=sys.stderr)
            return
        self.written.append(paths)
        print(
            f"trainstack run: rank {self.rank} (pid {os.getpid()}) profiled steps {self.started_at}-{self.step - 1}: {paths['trace']}",
            file=sys.stderr,
        )

"""Interpreter-start entry of the run hook: cheap when no ``TRAINSTACK_*`` switch is set.

Imports nothing of trainstack or torch. When a switch is set, the hook starts right after
the job itself imports torch (a process that never does is left alone), by which time every
site folder is on sys.path. Installed into an environment as a copy
(``_trainstack_run_boot.py``) beside a ``.pth`` line that calls ``main()``.
"""

import importlib.abc
import os
import sys

SWITCHES = ("TRAINSTACK_PROFILE_DIR", "TRAINSTACK_PROFILE_STEPS", "TRAINSTACK_OOM_SNAPSHOT", "TRAINSTACK_MEMPLAN", "TRAINSTACK_COMPILE")
ALLOC_CONFS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")
PLANNED_ALLOCATOR = "expandable_segments:True"  # the allocator memplan's overheads were measured with
HOME = "TRAINSTACK_RUN_HOME"  # where trainstack is importable from, for a Python without it
_booted: list[bool] = []


def main():
    if _booted:
        return  # both a .pth and trainstack run's sitecustomize may call it
    _booted.append(True)
    if not any(os.environ.get(name, "") not in ("", "0") for name in SWITCHES):
        return
    if os.environ.get("TRAINSTACK_MEMPLAN", "").strip() and not any(os.environ.get(name) for name in ALLOC_CONFS):
        # before the job's first CUDA allocation: an allocator that maps memory as it grows
        # leaves little of its cache unusable, so the planned peak is what it reserves
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = PLANNED_ALLOCATOR
    if "torch" in sys.modules:
        _activate()
    else:
        sys.meta_path.insert(0, _AfterTorch())


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps torch's loader so the hook starts once torch is loaded."""

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            exec_module = spec.loader.exec_module

            def exec_then_activate(module):
                exec_module(module)
                _activate()

            spec.loader.exec_module = exec_then_activate
        return spec


def _activate():
    try:
        from trainstack.run.hook import activate
    except ImportError:
        home = os.environ.get(HOME)
        if not home or home in sys.path:
            print(
                "trainstack run: hook off: trainstack is not importable in this Python (install it, or set TRAINSTACK_RUN_HOME)",
                file=sys.stderr,
            )
            return
        sys.path.append(home)  # after the job's own packages
        try:
            from trainstack.run.hook import activate
        except ImportError as exc:
            print(f"trainstack run: hook off: {exc}", file=sys.stderr)
            return
    activate()

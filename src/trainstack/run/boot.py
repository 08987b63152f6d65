"""Interpreter-start entry of the run hook: cheap when no ``TRAINSTACK_*`` switch is set.

Imports nothing of trainstack or torch unless a switch is set. Installed into an
environment as a copy (``_trainstack_run_boot.py``) beside a ``.pth`` line that calls
``main()``, so an environment without trainstack only pays for reading the variables.
"""

import os
import sys

SWITCHES = ("TRAINSTACK_PROFILE_DIR", "TRAINSTACK_PROFILE_STEPS", "TRAINSTACK_OOM_SNAPSHOT", "TRAINSTACK_MEMPLAN", "TRAINSTACK_COMPILE")
HOME = "TRAINSTACK_RUN_HOME"  # where trainstack is importable from, for a Python without it
_booted = []


def main():
    if _booted:
        return  # both a .pth and trainstack run's sitecustomize may call it
    _booted.append(True)
    if not any(os.environ.get(name, "") not in ("", "0") for name in SWITCHES):
        return
    try:
        from trainstack.run.hook import activate
    except ImportError:
        home = os.environ.get(HOME)
        if not home or home in sys.path:
            print("trainstack run: hook off: trainstack is not importable in this Python (install it, or set TRAINSTACK_RUN_HOME)", file=sys.stderr)
            return
        sys.path.append(home)  # after the job's own packages
        try:
            from trainstack.run.hook import activate
        except ImportError as exc:
            print(f"trainstack run: hook off: {exc}", file=sys.stderr)
            return
    activate()

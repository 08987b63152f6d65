"""Put the run hook where a Python finds it at start: a ``.pth`` in an environment's
site-packages (the venv build), or a ``sitecustomize`` folder for PYTHONPATH (the run verb).

Both copy ``boot.py`` as ``_trainstack_run_boot.py``: it reads the variables and does nothing
unless one is set.
"""

from __future__ import annotations

from pathlib import Path

from trainstack.fsutil import atomic_write_text

BOOT_MODULE = "_trainstack_run_boot"
PTH_NAME = "trainstack-run.pth"
PTH_LINE = f"import {BOOT_MODULE}; {BOOT_MODULE}.main()\n"

# Run the hook, then the sitecustomize this one hides on sys.path, if any.
SITECUSTOMIZE = f'''"""trainstack run: the TRAINSTACK_* hook, then any other sitecustomize on sys.path."""
import importlib.machinery
import importlib.util
import os
import sys

import {BOOT_MODULE}

{BOOT_MODULE}.main()


def _next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_next_sitecustomize()
'''


def _boot_source() -> str:
    return (Path(__file__).parent / "boot.py").read_text()


def install_pth(site_packages: Path) -> Path:
    """Install the hook into one site-packages folder; returns the .pth file."""
    atomic_write_text(site_packages / f"{BOOT_MODULE}.py", _boot_source())
    pth = site_packages / PTH_NAME
    atomic_write_text(pth, PTH_LINE)
    return pth


def install_into_venv(venv: Path) -> list[Path]:
    """The hook in every site-packages of a virtual environment (off unless a variable is set)."""
    return [install_pth(site) for site in sorted(venv.glob("lib/python*/site-packages"))]


def write_sitecustomize(folder: Path) -> Path:
    """A folder to put first on PYTHONPATH: the hook starts in every Python of the job."""
    atomic_write_text(folder / f"{BOOT_MODULE}.py", _boot_source())
    atomic_write_text(folder / "sitecustomize.py", SITECUSTOMIZE)
    return folder

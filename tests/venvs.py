"""A uv venv that sees this Python's packages, whether this Python runs in a venv or not.

uv's ``--system-site-packages`` gives a new venv its *base* interpreter's packages: where the
tests run in a venv of their own (as ``.ci/run`` makes one), that is the system's Python, which
has neither torch nor trainstack's dependencies. A venv made here reads this interpreter's site
directories after its own instead (a .pth file calls site.addsitedir on each, so their own .pth
files, an editable install's among them, take effect): what the venv installs comes first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PTH_NAME = "00-this-python.pth"


def site_dirs() -> list[str]:
    """This interpreter's site directories, in the order it searches them."""
    return [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]


def venv_over_this_python(venv: Path, *, uv: str = "uv") -> Path:
    """Make ``venv`` (uv, this interpreter's version) over this Python's packages; its python."""
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, capture_output=True, text=True, timeout=120)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    calls = "; ".join(f"site.addsitedir({d!r})" for d in site_dirs())
    (site / PTH_NAME).write_text(f"import site; {calls}\n", encoding="utf-8")
    return venv / "bin" / "python"

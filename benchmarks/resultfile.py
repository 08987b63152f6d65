"""A benchmark's result as its script writes it: the printed text (NAME.txt) and a JSON
document (NAME.json) in the benchmark's own folder, benchmarks/results/FOLDER/ (FOLDER: NAME
unless the script names another), each with the date, the commit, the machine, the command
and the load the machine carried while it ran."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from trainstack.fsutil import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


class Run:
    """Started when the benchmark starts: notes the context then, and the load again at the end."""

    def __init__(self, name: str, folder: str | None = None) -> None:
        self.name = name
        self.folder = RESULTS / (folder or name)
        self.started = dt.datetime.now(dt.timezone.utc)
        self.load_start = os.getloadavg()
        commit = _git("rev-parse", "--short", "HEAD")
        # what was measured: the code, not the results a run before this one wrote
        dirty = _git("status", "--porcelain", "--untracked-files=no", "--", "src", "benchmarks", ":!benchmarks/results")
        self.meta = {
            "date": self.started.date().isoformat(),
            "started_at": self.started.isoformat(timespec="seconds"),
            "commit": commit + (" (with uncommitted changes in src/ or benchmarks/)" if dirty else ""),
            "machine": f"{os.cpu_count()}-core {platform.machine()} ({_cpu_model()}), {_memory_gib()} GiB",
            "python": platform.python_version(),
            "command": "python " + shlex.join(["benchmarks/" + Path(sys.argv[0]).name, *sys.argv[1:]]),
        }

    def load_text(self) -> str:
        end = os.getloadavg()
        return (f"load average (1, 5, 15 min) at start {self.load_start[0]:.2f} {self.load_start[1]:.2f} "
                f"{self.load_start[2]:.2f}, at end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f} "
                f"on {os.cpu_count()} cores shared with other jobs")

    def header(self) -> str:
        m = self.meta
        return f"{m['date']} commit {m['commit']} on {m['machine']}, Python {m['python']}\n$ {m['command']}"

    def write(self, text: str, figures: dict) -> None:
        """NAME.txt (header, the printed text, the load) and NAME.json (the same context and the figures)."""
        load = self.load_text()
        finished = dt.datetime.now(dt.timezone.utc)
        meta = {**self.meta, "seconds": round((finished - self.started).total_seconds(), 1), "load": load}
        atomic_write_text(self.folder / f"{self.name}.txt", f"{self.header()}\n{text.rstrip()}\n{load}\n")
        atomic_write_json(self.folder / f"{self.name}.json", {**meta, "figures": figures})
        print(f"wrote {self.folder.relative_to(ROOT)}/{self.name}.txt and .json")

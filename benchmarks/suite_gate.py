"""The suite gate's counts next to pytest's own summary line, on real suites: numpy's full
suite (pytest --pyargs numpy), scipy.linalg, and the planted-failure suite (tests/data/planted_suite:
failures, a flaky parametrised test, a teardown error, a collection error; a crash; a hang
with a child process).

Usage: python benchmarks/suite_gate.py [--only NAME ...] [--out DIR]
A uv venv with numpy, scipy, pytest and hypothesis is made in a temporary directory (the uv
cache makes later runs fast). Writes DIR/suite_gate.txt and DIR/suite_gate.json
(default DIR: benchmarks/results/suite_gate).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from trainstack import proc
from trainstack.stackfile.schema import Suite
from trainstack.verify.suites.gate import run_gate
from trainstack.verify.suites.known_issues import KnownIssues
from trainstack.verify.suites.schema import SuiteResult
from trainstack.verify.target import open_target

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ["numpy", "scipy", "pytest", "hypothesis"]
PLANTED = "-p no:cacheprovider -o python_files=planted_*.py"
SUITES = [
    Suite(name="numpy", command="python -m pytest -p no:cacheprovider --pyargs numpy", timeout=3000),
    # the same, every module that imports collected: numpy's f2py tests need meson to import
    Suite(name="numpy-continue", command="python -m pytest -p no:cacheprovider --pyargs numpy "
          "--continue-on-collection-errors", timeout=3000),
    Suite(name="scipy-linalg", command="python -m pytest -p no:cacheprovider --pyargs scipy.linalg", timeout=1800),
    Suite(name="planted", command=f"python -m pytest {PLANTED} --continue-on-collection-errors tests/data/planted_suite/main",
          timeout=300),
    Suite(name="planted-interrupted", command=f"python -m pytest {PLANTED} tests/data/planted_suite/main", timeout=300),
    Suite(name="planted-crash", command=f"python -m pytest {PLANTED} tests/data/planted_suite/crash", timeout=300),
    Suite(name="planted-hang", command=f"python -m pytest {PLANTED} tests/data/planted_suite/hang", timeout=20),
]


def make_venv(root: Path) -> Path:
    venv = root / "venv"
    proc.run(["uv", "venv", "-q", "--python", sys.executable, venv])
    result = proc.run(["uv", "pip", "install", "-q", "--python", venv / "bin/python", *PACKAGES])
    if not result.ok:
        sys.exit(f"uv pip install failed: {result.stderr.strip().splitlines()[-1]}")
    return venv / "bin" / "python"


def versions(python: Path) -> str:
    code = "import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in %r))" % (PACKAGES,)
    return proc.run([python, "-c", code], echo=False).stdout.strip()


def counts_text(counts: dict[str, int]) -> str:
    order = ("failed", "passed", "skipped", "xfailed", "xpassed", "error")
    return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k)) or "-"


def child_killed(state: Path) -> str:
    pid_file = state / "child.pid"
    if not pid_file.exists():
        return ""
    pid = int(pid_file.read_text())
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return f"; the hang's child process {pid} is gone"
    state_line = next(line for line in status.splitlines() if line.startswith("State:"))
    return f"; the hang's child process {pid}: {state_line.split(None, 1)[1]}"


def row(suite: SuiteResult) -> list[str]:
    return [suite.name, suite.status, counts_text(suite.counts), suite.summary_line or "(no summary line)",
            suite.cross_check.split(":")[0] if suite.cross_check else "-", str(len(suite.failed)),
            str(len(suite.collection_errors)), str(len(suite.flaky)), f"{suite.seconds:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", help="suite names to run (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "suite_gate")
    args = parser.parse_args()
    chosen = [s for s in SUITES if not args.only or s.name in args.only]
    with tempfile.TemporaryDirectory() as tmp:
        python = make_venv(Path(tmp))
        state = Path(tmp) / "state"
        state.mkdir()
        os.environ["PLANTED_STATE"] = str(state)
        start = time.perf_counter()
        gate = run_gate(open_target(python), chosen, max_failed_tests=0, known=KnownIssues(),
                        target_name="local", cwd=REPO)
        seconds = time.perf_counter() - start
        killed = child_killed(state)
        header = ["suite", "gate status", "gate counts", "pytest's summary line", "counts vs summary",
                  "failing", "collection errors", "flaky", "seconds"]
        rows = [row(s) for s in gate.suites]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = [f"{versions(python)}; {os.cpu_count()} CPUs; {seconds:.0f} s in all{killed}", "",
                 *("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *rows]), ""]
        lines += [f"{s.name}: {s.reason}" for s in gate.suites]
        text = "\n".join(lines) + "\n"
        print(text)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "suite_gate.txt").write_text(text, encoding="utf-8")
        (args.out / "suite_gate.json").write_text(gate.model_dump_json(indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

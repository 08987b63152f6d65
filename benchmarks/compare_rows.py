#!/usr/bin/env python3
"""How `trainstack bench --compare A B` scales with the rows of its files: wall time and peak
memory of the whole process at several sizes, each beside the floor of reading the same two
files (json.loads of every line in a bare interpreter), with the ratio of the two.

The files are written here: N rows each, every row matched in the other file, half of them with
a kernel breakdown (what makes the second table). Output goes to a file (not a terminal), as in CI.

Usage: python benchmarks/compare_rows.py [--rows 40000 200000] [--src DIR --name NAME] [--limit S]
  --src DIR: run the trainstack of another source tree (DIR/src), for a before/after pair;
  --limit S: a run still going after S seconds is killed and noted as such.
Writes benchmarks/results/compare_rows/NAME.{txt,json} (NAME: compare_rows unless given).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resultfile import Run  # noqa: E402

PY = sys.executable
FLOOR = "import json, sys\nfor p in sys.argv[1:]:\n    rows = [json.loads(l) for l in open(p) if l.strip()]\n"


def results_file(path: Path, rows: int, speed: float) -> None:
    with path.open("w") as fh:
        for n in range(rows):
            row = {"model": f"m{n % 97}", "mode": "compile", "status": "ok", "batch": 1 + n // 97, "seq": 512,
                   "world_size": 1, "tokens_per_s_per_gpu": speed + n % 13, "mfu": 0.4, "mem_allocated_gib": 3.5}
            if n % 2:
                row["breakdown"] = {"idle_share": 0.1, "wall_ms_per_step": 12.0,
                                    "classes": {"GEMM": {"share": 0.6, "ms_per_step": 7.0}}}
            fh.write(json.dumps(row) + "\n")


def measure(argv: list[str], env: dict[str, str], out: Path, limit: float | None = None) -> tuple[float, float, int]:
    """(seconds, peak resident MiB, exit status) of one process, its output to ``out``; killed
    (exit -9) when it runs past ``limit`` seconds."""
    import threading

    start = time.perf_counter()
    with out.open("w") as sink:
        child = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
        timer = threading.Timer(limit, child.kill) if limit else None
        if timer is not None:
            timer.start()
        _, status, usage = os.wait4(child.pid, 0)
        if timer is not None:
            timer.cancel()
    return time.perf_counter() - start, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[40_000, 200_000])
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--name", default="compare_rows")
    parser.add_argument("--limit", type=float, default=None)
    args = parser.parse_args()
    run = Run(args.name, "compare_rows")
    env = dict(os.environ)
    if args.src is not None:
        env["PYTHONPATH"] = str(args.src.resolve() / "src")
    lines, figures = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for rows in args.rows:
            a, b = folder / f"a{rows}.jsonl", folder / f"b{rows}.jsonl"
            results_file(a, rows, 1000.0)
            results_file(b, rows, 1100.0)
            ours = measure([PY, "-m", "trainstack.cli", "bench", "--compare", str(a), str(b)], env, folder / "out.txt", args.limit)
            floor = measure([PY, "-c", FLOOR, str(a), str(b)], env, folder / "floor.txt")
            printed = sum(1 for _ in (folder / "out.txt").open())
            killed = " KILLED at the limit, not finished" if ours[2] == -9 else ""
            line = (f"{rows:>7} rows: bench --compare{killed} {ours[0]:6.2f} s, {ours[1]:6.0f} MiB peak (exit {ours[2]}, "
                    f"{printed} lines out); reading the two files alone {floor[0]:5.2f} s, {floor[1]:4.0f} MiB: "
                    f"{ours[0] / floor[0]:.1f}x the time, {ours[1] / floor[1]:.1f}x the memory")
            print(line, flush=True)
            lines.append(line)
            figures[str(rows)] = {"seconds": round(ours[0], 2), "peak_mib": round(ours[1]), "exit": ours[2],
                                  "lines_out": printed, "floor_seconds": round(floor[0], 2), "floor_peak_mib": round(floor[1])}
    source = "this tree's trainstack"
    if args.src is not None:
        commit = subprocess.run(["git", "-C", str(args.src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        source = f"the trainstack of commit {commit.stdout.strip() or 'unknown'} (another source tree)"
    run.write(f"{source}\n" + "\n".join(lines), figures)


if __name__ == "__main__":
    main()

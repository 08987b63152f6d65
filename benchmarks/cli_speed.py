#!/usr/bin/env python3
"""How fast the CLI answers: whole processes, wall time, each paired with an alternative.

Each case runs its trainstack command and its alternative in turn (A B A B ...) after one
warm-up of each; the figures are medians and the ratio is taken pair by pair, so drift of a
shared machine cancels. The alternatives: the interpreter doing nothing (the floor every
Python CLI pays), pytest's --help (a Python CLI of the same kind), and importing torch (what
a verb would pay if it imported torch before checking its arguments).

Usage: python benchmarks/cli_speed.py [--runs 9]
Writes benchmarks/results/cli_speed/cli_speed.{txt,json}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resultfile import Run  # noqa: E402

PY = sys.executable
TS = [PY, "-m", "trainstack.cli"]
# (name, trainstack command, alternative's name, alternative, target seconds or None)
CASES = (
    ("trainstack --help", [*TS, "--help"], "python -c pass", [PY, "-c", "pass"], 0.3),
    ("trainstack --help", [*TS, "--help"], "pytest --help", [PY, "-m", "pytest", "--help"], 0.3),
    ("bench --compare A B", [*TS, "bench", "--compare", "{a}", "{b}"], "python -c pass", [PY, "-c", "pass"], 1.0),
    ("memplan --seq 0 (refused)", [*TS, "memplan", "--seq", "0"], "python -c 'import torch'", [PY, "-c", "import torch"], None),
    ("trainstack check STACK", [*TS, "check", "{stack}"], "python -c pass", [PY, "-c", "pass"], None),
)


def wall(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, done.returncode


def results_file(path: Path, speeds: tuple[float, float]) -> Path:
    rows = [{"model": "tiny", "mode": mode, "status": "ok", "batch": 2, "seq": 64, "world_size": 1,
             "tokens_per_s_per_gpu": speed, "mfu": None, "mem_allocated_gib": 1.0}
            for mode, speed in zip(("eager", "compile"), speeds)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9, help="counted runs of each command (after one warm-up)")
    args = parser.parse_args()
    run = Run("cli_speed")
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        fill = {"a": str(results_file(Path(tmp) / "a.jsonl", (100.0, 150.0))),
                "b": str(results_file(Path(tmp) / "b.jsonl", (110.0, 140.0))),
                "stack": str(root / "examples" / "stacks" / "cpu-minimal.toml")}
        lines, figures = [], []
        header = f"{'command':<28} {'median s':>9} {'alternative':<26} {'median s':>9} {'ratio':>6}  target"
        lines.append(header)
        print(header, flush=True)
        for name, argv, alt_name, alt, target in CASES:
            argv = [part.format(**fill) for part in argv]
            wall(argv), wall(alt)  # warm-up: the file cache, the bytecode
            mine, theirs, codes = [], [], set()
            for _ in range(args.runs):
                seconds, code = wall(argv)
                mine.append(seconds)
                codes.add(code)
                theirs.append(wall(alt)[0])
            ratios = [a / b for a, b in zip(mine, theirs)]
            median, other, ratio = statistics.median(mine), statistics.median(theirs), statistics.median(ratios)
            verdict = "-" if target is None else f"{target:g} s: {'met' if median < target else 'MISSED'}"
            line = f"{name:<28} {median:>9.3f} {alt_name:<26} {other:>9.3f} {ratio:>6.2f}  {verdict}"
            lines.append(line)
            print(line, flush=True)
            shown = [{fill["a"]: "A.jsonl", fill["b"]: "B.jsonl", fill["stack"]: "examples/stacks/cpu-minimal.toml"}.get(a, a) for a in argv[1:]]
            figures.append({"command": name, "argv": shown, "exit_codes": sorted(codes), "median_s": round(median, 4),
                            "min_s": round(min(mine), 4), "max_s": round(max(mine), 4), "alternative": alt_name,
                            "alternative_median_s": round(other, 4), "ratio_median": round(ratio, 3), "target_s": target,
                            "runs": args.runs})
    run.write("\n".join(lines), {"cases": figures})


if __name__ == "__main__":
    main()

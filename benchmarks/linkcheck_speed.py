"""Seconds to link-check a full torch CUDA venv, next to ldd over the same files.

Usage: python benchmarks/linkcheck_speed.py [VENV]
Without VENV, a venv with the CUDA torch of examples/stacks/torch-cuda.toml is made with uv
in a temporary directory (the uv cache makes later runs fast).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trainstack import proc
from trainstack.spec import load_stack
from trainstack.verify.linkcheck.check import check_paths, find_elf_files
from trainstack.verify.linkcheck.elf import cpu_count

REPO = Path(__file__).resolve().parent.parent
REPEATS = 3


def make_venv(root: Path) -> Path:
    torch_version = load_stack(REPO / "examples/stacks/torch-cuda.toml").components["torch"].version
    venv = root / "venv"
    proc.run(["uv", "venv", "-q", "--python", "3.11", venv])
    result = proc.run(["uv", "pip", "install", "-q", "--python", venv / "bin/python", f"torch{torch_version}"])
    if not result.ok:
        sys.exit(f"uv pip install failed: {result.stderr.strip().splitlines()[-1]}")
    return venv


def time_linkcheck(venv: Path, scan_strings: bool = True, cache: bool = False) -> float:
    start = time.perf_counter()
    check_paths([venv], scan_strings=scan_strings, cache=cache)
    return time.perf_counter() - start


def time_ldd(files: list[str], workers: int) -> float:
    """ldd over every file, split over ``workers`` concurrent ldd processes."""
    chunks = [files[i::workers] for i in range(workers)]
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda chunk: proc.run(["ldd", *chunk], echo=False), chunks))
    return time.perf_counter() - start


def time_cli(venv: Path, cache: bool) -> float:
    start = time.perf_counter()
    flag = "--cache" if cache else "--no-cache"
    proc.run([sys.executable, "-m", "trainstack.cli", "linkcheck", "--json", flag, venv], echo=False)
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(sys.argv[1]) if len(sys.argv) > 1 else make_venv(Path(tmp))
        files = find_elf_files([venv])
        workers = cpu_count()
        ldd = statistics.median(time_ldd(files, workers) for _ in range(REPEATS))
        rows = [
            ("NEEDED + dlopen data, cold", statistics.median(time_linkcheck(venv, False) for _ in range(REPEATS))),
            ("plus .rodata dlopen-candidate scan, cold", statistics.median(time_linkcheck(venv) for _ in range(REPEATS))),
            ("CLI (start, imports, full check), cold", statistics.median(time_cli(venv, False) for _ in range(REPEATS))),
        ]
        with tempfile.TemporaryDirectory() as cache_dir:
            os.environ["TRAINSTACK_CACHE_DIR"] = cache_dir
            time_linkcheck(venv, cache=True)  # fills the cache
            rows.append(("full check, files already read once", statistics.median(time_linkcheck(venv, cache=True) for _ in range(REPEATS))))
            rows.append(("CLI, files already read once", statistics.median(time_cli(venv, True) for _ in range(REPEATS))))
        print(f"{len(files)} ELF objects in {venv}; {workers} CPUs; median of {REPEATS} runs")
        print(f"{'ldd over the same files (' + str(workers) + ' ldd processes)':<52} {ldd:7.3f} s")
        for label, seconds in rows:
            print(f"{'linkcheck: ' + label:<52} {seconds:7.3f} s   ldd/linkcheck = {ldd / seconds:5.2f}x")


if __name__ == "__main__":
    main()

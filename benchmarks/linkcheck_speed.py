"""Seconds to link-check a full torch CUDA venv, next to ldd over the same files.

Usage: python benchmarks/linkcheck_speed.py [VENV]
Without VENV, a venv with the CUDA torch of examples/stacks/torch-cuda.toml is made with uv
in a temporary directory (the uv cache makes later runs fast).
"""

from __future__ import annotations

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


def time_linkcheck(venv: Path) -> tuple[float, int]:
    start = time.perf_counter()
    report = check_paths([venv])
    return time.perf_counter() - start, report.files_checked


def time_ldd(files: list[str], workers: int) -> float:
    """ldd over every file, split over ``workers`` concurrent ldd processes."""
    chunks = [files[i::workers] for i in range(workers)]
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda chunk: proc.run(["ldd", *chunk], echo=False), chunks))
    return time.perf_counter() - start


def time_cli(venv: Path) -> float:
    start = time.perf_counter()
    proc.run([sys.executable, "-m", "trainstack.cli", "linkcheck", "--json", venv], echo=False)
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(sys.argv[1]) if len(sys.argv) > 1 else make_venv(Path(tmp))
        files = find_elf_files([venv])
        workers = cpu_count()
        ours = [time_linkcheck(venv)[0] for _ in range(REPEATS)]
        cli = [time_cli(venv) for _ in range(REPEATS)]
        ldd = [time_ldd(files, workers) for _ in range(REPEATS)]
        ours_s, cli_s, ldd_s = statistics.median(ours), statistics.median(cli), statistics.median(ldd)
        print(f"files: {len(files)} ELF objects in {venv} ({workers} CPUs, median of {REPEATS})")
        print(f"trainstack linkcheck (library call): {ours_s:.3f} s")
        print(f"trainstack linkcheck (whole CLI):    {cli_s:.3f} s")
        print(f"ldd over the same files ({workers} in parallel): {ldd_s:.3f} s")
        print(f"ratio ldd / linkcheck: {ldd_s / ours_s:.1f}x (library), {ldd_s / cli_s:.1f}x (CLI)")


if __name__ == "__main__":
    main()

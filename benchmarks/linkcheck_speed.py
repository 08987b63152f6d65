"""Seconds to link-check a full torch CUDA venv, next to ldd over the same files: the static
pass alone, and with its findings confirmed inside the venv's interpreter (what verify does).

Usage: python benchmarks/linkcheck_speed.py [VENV] [--repeats N] [--out FILE] [--name NAME]
Without VENV, a venv with the CUDA torch of examples/stacks/torch-cuda.toml is made with uv
in a temporary directory (the uv cache makes later runs fast). The printed table and the
figures go to benchmarks/results/linkcheck_speed/NAME.txt and NAME.json (NAME: linkcheck_speed); FILE gets
the printed table too.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from resultfile import Run
from trainstack import proc
from trainstack.stackfile import load_stack
from trainstack.verify.linkcheck.check import LinkReport, check_paths, find_elf_files
from trainstack.verify.linkcheck.confirm import confirm_in_target
from trainstack.verify.linkcheck.elf import cpu_count
from trainstack.verify.target import open_target

REPO = Path(__file__).resolve().parent.parent
REPEATS = 3


def torch_version() -> str:
    return load_stack(REPO / "examples/stacks/torch-cuda.toml").components["torch"].version


def make_venv(root: Path) -> Path:
    venv = root / "venv"
    proc.run(["uv", "venv", "-q", "--python", "3.11", venv])
    result = proc.run(["uv", "pip", "install", "-q", "--python", venv / "bin/python", f"torch{torch_version()}"])
    if not result.ok:
        sys.exit(f"uv pip install failed: {result.stderr.strip().splitlines()[-1]}")
    return venv


def time_linkcheck(venv: Path, scan_strings: bool = True, cache: bool = False) -> float:
    start = time.perf_counter()
    check_paths([venv], scan_strings=scan_strings, cache=cache)
    return time.perf_counter() - start


def time_confirmed(venv: Path) -> tuple[float, LinkReport]:
    """The static pass plus confirmation in the venv's interpreter, as verify runs it."""
    start = time.perf_counter()
    target = open_target(venv / "bin" / "python")
    report = confirm_in_target(check_paths(target.library_roots(), cache=False), target)
    return time.perf_counter() - start, report


def time_ldd(files: list[str], workers: int) -> float:
    """ldd over every file, split over ``workers`` concurrent ldd processes."""
    chunks = [files[i::workers] for i in range(workers)]
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda chunk: proc.run(["ldd", *chunk], echo=False), chunks))
    return time.perf_counter() - start


def time_cli(venv: Path, cache: bool, confirm: bool = False) -> float:
    start = time.perf_counter()
    flags = ["--cache" if cache else "--no-cache", "--confirm" if confirm else "--no-confirm"]
    proc.run([sys.executable, "-m", "trainstack.cli", "linkcheck", "--json", *flags, venv], echo=False)
    return time.perf_counter() - start


def median(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    return statistics.median(fn() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("venv", nargs="?", type=Path)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--name", default="linkcheck_speed", help="result file name under benchmarks/results/linkcheck_speed/")
    args = parser.parse_args()
    run = Run(args.name, folder="linkcheck_speed")
    with tempfile.TemporaryDirectory() as tmp:
        venv = args.venv or make_venv(Path(tmp))
        where = str(venv) if args.venv else f"a temporary uv venv with torch {torch_version()}"
        files = find_elf_files([venv])
        workers = cpu_count()
        n = args.repeats
        ldd = median(lambda: time_ldd(files, workers), n)
        rows = [
            ("NEEDED + dlopen data, cold", median(lambda: time_linkcheck(venv, False), n)),
            ("plus .rodata dlopen-candidate scan, cold", median(lambda: time_linkcheck(venv), n)),
        ]
        confirmed = [time_confirmed(venv) for _ in range(n)]
        rows.append(("full check + confirmation in the target, cold", statistics.median(t for t, _ in confirmed)))
        rows.append(("CLI (start, imports, full check), cold", median(lambda: time_cli(venv, False), n)))
        rows.append(("CLI with confirmation in the target, cold", median(lambda: time_cli(venv, False, True), n)))
        with tempfile.TemporaryDirectory() as cache_dir:
            os.environ["TRAINSTACK_CACHE_DIR"] = cache_dir
            time_linkcheck(venv, cache=True)  # fills the cache
            rows.append(("full check, files already read once", median(lambda: time_linkcheck(venv, cache=True), n)))
            rows.append(("CLI, files already read once", median(lambda: time_cli(venv, True), n)))
        report = confirmed[0][1]
        statuses = collections.Counter(i.status or i.kind for i in report.issues)
        lines = [
            f"{len(files)} ELF objects in {where}; {workers} CPUs; median of {n} runs",
            f"{'ldd over the same files (' + str(workers) + ' ldd processes)':<56} {ldd:7.3f} s",
            *(f"{'linkcheck: ' + label:<56} {seconds:7.3f} s   ldd/linkcheck = {ldd / seconds:5.2f}x" for label, seconds in rows),
            f"findings after confirmation: {dict(sorted(statuses.items()))}; errors: {len(report.errors)}; "
            f"confirmation alone {report.confirm_seconds:.3f} s",
        ]
        print("\n".join(lines))
        if args.out:
            args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        run.write("\n".join(lines), {
            "venv": where,
            "elf_files": len(files), "ldd_processes": workers, "repeats": n, "ldd_s": round(ldd, 3),
            "linkcheck_s": {label: round(seconds, 3) for label, seconds in rows},
            "ldd_over_linkcheck": {label: round(ldd / seconds, 2) for label, seconds in rows},
            "findings": dict(sorted(statuses.items())), "errors": len(report.errors),
            "confirm_s": round(report.confirm_seconds, 3),
        })


if __name__ == "__main__":
    main()

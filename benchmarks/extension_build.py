"""Compiled extensions: cold build, cached rebuild, and flash-attn's compile rate.

    python3 benchmarks/extension_build.py deepspeed [--python 3.12] [--wheels DIR]
        DeepSpeed from its sdist with fused_adam, fused_lamb and cpu_adam for sm_90, built by
        `trainstack build` into a fresh build folder (cold: nothing in the wheel cache), then
        again with --force (the wheel cache hit); prints both and their ratio, copies the wheel
        to DIR when given.
    python3 benchmarks/extension_build.py flash-attn --sdist FILE --seconds S [--jobs N]
        flash-attn's own build (setup.py build_ext, ninja, MAX_JOBS=N, sm_90 only) stopped after
        S seconds: how many of its translation units compiled, of how many, on this machine's
        cores. Uses the environment's torch and CUDA_HOME (the H200 image: nvcc 13.0).

Results are appended to benchmarks/results/extension_build.json (one entry per run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "extension_build.json"
STACK_EDITS = {
    r"\nflash-attn = [^\n]*": "",
    r"\napex = [^\n]*": "",
    r'build_env = \{ DS_BUILD_OPS = "0"[^}]*\}': 'build_env = { DS_BUILD_OPS = "0", DS_BUILD_FUSED_ADAM = "1", '
    'DS_BUILD_FUSED_LAMB = "1", DS_BUILD_CPU_ADAM = "1", DS_BUILD_AIO = "0" }',
    r'packages = \["ninja", "cmake"\]': 'packages = ["ninja", "cmake", "setuptools", "wheel"]\narchs = ["90"]',
}


def cpus() -> float:
    """trainstack's cgroup-aware CPU count; the affinity mask where trainstack's dependencies are absent."""
    sys.path.insert(0, str(ROOT / "src"))
    try:
        from trainstack.build.cpu import effective_cpus
    except ImportError:
        return float(len(os.sched_getaffinity(0)))
    return effective_cpus()


def deepspeed(python: str, wheels: Path | None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="ts-extbench-"))
    text = (ROOT / "examples" / "stacks" / "torch-cuda.toml").read_text(encoding="utf-8")
    for pattern, new in STACK_EDITS.items():
        text, count = re.subn(pattern, lambda _: new, text)
        assert count == 1, pattern
    stack = work / "torch-cuda.toml"
    stack.write_text(text, encoding="utf-8")
    flavour = f"cu130-ubuntu2404-py{python.replace('.', '')}-release"
    subprocess.run(["trainstack", "lock", str(stack), "--flavour", flavour], check=True)
    runs = {}
    for run, extra in (("cold", []), ("cached", ["--force"])):
        start = time.perf_counter()
        subprocess.run(["trainstack", "build", str(stack), "--flavour", flavour, "--build-dir", str(work / "build"), *extra], check=True)
        record = json.loads((work / "build" / flavour / "build.json").read_text())
        step = next(s for s in record["steps"] if s["name"] == "compile-deepspeed")
        runs[run] = {"build_seconds": round(time.perf_counter() - start, 1), "compile_step_seconds": step["seconds"],
                     **record["extensions"]["deepspeed"]}
    if wheels is not None:
        wheels.mkdir(parents=True, exist_ok=True)
        for wheel in (work / "build" / ".extensions").glob("deepspeed-*/*.whl"):
            shutil.copy2(wheel, wheels / wheel.name)
    shutil.rmtree(work, ignore_errors=True)
    cold, cached = runs["cold"], runs["cached"]
    return {"extension": "deepspeed (fused_adam, fused_lamb, cpu_adam; sm_90)", "python": python, **runs,
            "compile_ratio_cold_over_cached": round(cold["compile_step_seconds"] / max(cached["compile_step_seconds"], 1e-3), 1),
            "build_ratio_cold_over_cached": round(cold["build_seconds"] / cached["build_seconds"], 2)}


def flash_attn(sdist: Path, seconds: float, jobs: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="ts-flash-"))
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    source = next(work.glob("flash_attn-*"))
    env = {**os.environ, "MAX_JOBS": str(jobs), "FLASH_ATTN_CUDA_ARCHS": "90", "TORCH_CUDA_ARCH_LIST": "9.0",
           "FLASH_ATTENTION_FORCE_BUILD": "TRUE", "NVCC_THREADS": "1"}
    start = time.perf_counter()
    try:
        subprocess.run([sys.executable, "setup.py", "build_ext"], cwd=source, env=env, timeout=seconds,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finished = True
    except subprocess.TimeoutExpired:
        finished = False
    elapsed = time.perf_counter() - start
    ninja = next(source.glob("build/temp*/build.ninja"), None)
    outputs = re.findall(r"^build (\S+\.o): cuda_compile", ninja.read_text(), re.M) if ninja else []
    units = len(outputs)
    done = len([o for o in outputs if Path(o).is_file() and Path(o).stat().st_size > 0])  # CUDA units only
    shutil.rmtree(work, ignore_errors=True)
    return {"extension": f"flash-attn ({sdist.name}; sm_90)", "jobs": jobs, "cpus": cpus(), "seconds": round(elapsed, 1),
            "finished": finished, "units_compiled": done, "units_total": units,
            "seconds_per_unit_per_job": round(elapsed * jobs / done, 1) if done else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["deepspeed", "flash-attn"])
    parser.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    parser.add_argument("--wheels", type=Path)
    parser.add_argument("--sdist", type=Path)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--where", default="this machine", help="recorded with the result")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = deepspeed(args.python, args.wheels) if args.what == "deepspeed" else flash_attn(args.sdist, args.seconds, args.jobs)
    result["where"] = args.where
    print(json.dumps(result, indent=1))
    previous = json.loads(args.out.read_text()) if args.out.is_file() else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(previous + [result], indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""Compiled extensions: cold build, cached rebuild, and flash-attn's compile rate.

    python3 benchmarks/extension_build.py deepspeed [--python 3.12] [--wheels DIR]
        DeepSpeed from its sdist with fused_adam, fused_lamb and cpu_adam for sm_90, built by
        `trainstack build` into a fresh build folder (cold: nothing in the wheel cache), then
        again with --force (the wheel cache hit); prints both and their ratio, copies the wheel
        to DIR when given.
    python3 benchmarks/extension_build.py apex [--git URL] [--wheels DIR]
        apex at the commit pinned in examples/stacks/apex-cuda.toml (APEX_CPP_EXT, APEX_CUDA_EXT:
        amp_C, fused_layer_norm_cuda, fused_dense_cuda, mlp_cuda, syncbn, the Megatron softmax
        kernels; sm_90), cold then cached, the same way; --git clones another copy of the
        repository (a file:// URL of a local mirror) at that commit.
    python3 benchmarks/extension_build.py apex --source DIR [--wheels DIR] [--logs DIR] [--stack FILE]
        apex from a checkout of that commit, in this environment (its Python's torch, the nvcc of
        CUDA_HOME) where the stack's venv cannot be made (no package index reachable): the same
        compiled-extension path as `trainstack build` (trainstack.builder.extensions.build_wheel
        into a wheel cache keyed by commit, torch, CUDA, GPU targets and build_env; the stack's
        build_env, GPU targets and MAX_JOBS from the CPU budget), cold then the cache hit; the
        build's step log goes to --logs, ninja's per-unit compile times into the result. Stopped
        by SIGINT (timeout -s INT), it still writes what it has.
    python3 benchmarks/extension_build.py flash-attn --sdist FILE --seconds S [--jobs N]
        flash-attn's own build (setup.py build_ext, ninja, MAX_JOBS=N, sm_90 only) stopped after
        S seconds: how many of its translation units compiled, of how many, on this machine's
        cores. Uses the environment's torch and CUDA_HOME (the H200 image: nvcc 13.0). The whole
        build, resumed across runs of a few minutes each: benchmarks/flash_attn_build.py.

Results are appended to benchmarks/results/extension_build/extension_build.json (one entry per run).
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
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "extension_build" / "extension_build.json"
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
        from trainstack.builder.cpu import effective_cpus
    except ImportError:
        return float(len(os.sched_getaffinity(0)))
    return effective_cpus()


def deepspeed(python: str, wheels: Path | None) -> dict:
    text = (ROOT / "examples" / "stacks" / "torch-cuda.toml").read_text(encoding="utf-8")
    for pattern, new in STACK_EDITS.items():
        text, count = re.subn(pattern, lambda _: new, text)
        assert count == 1, pattern
    runs = cold_and_cached(text, "torch-cuda.toml", "deepspeed", python, wheels)
    return {"extension": "deepspeed (fused_adam, fused_lamb, cpu_adam; sm_90)", "python": python, **runs}


def apex(git: str | None, wheels: Path | None) -> dict:
    text = (ROOT / "examples" / "stacks" / "apex-cuda.toml").read_text(encoding="utf-8")
    if git is not None:
        text, count = re.subn(r'git = "[^"]*"', lambda _: f'git = "{git}"', text)
        assert count == 1
    runs = cold_and_cached(text, "apex-cuda.toml", "apex", "3.12", wheels)
    return {"extension": "apex (APEX_CPP_EXT, APEX_CUDA_EXT; sm_90)", "python": "3.12", **runs}


def apex_in_place(source: Path, wheels: Path | None, logs: Path | None, stack_file: Path) -> dict:
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    from torch.utils.cpp_extension import CUDA_HOME
    from trainstack.buildenv import budget_for, max_jobs
    from trainstack.builder.extensions import ExtensionKey, WheelCache, build_wheel
    from trainstack.buildenv import arch_env
    from trainstack.builder.steps import Steps
    from trainstack.errors import TrainstackError
    from trainstack.stackfile.load import load_stack

    if (os.environ.get("CUDA_HOME") or CUDA_HOME) is None:
        raise SystemExit("apex --source: no CUDA toolkit here (torch found no nvcc; set CUDA_HOME)")
    stack = load_stack(stack_file)
    apex_component = stack.components["apex"]
    home = Path(os.environ.get("CUDA_HOME") or CUDA_HOME)
    nvcc = subprocess.run([home / "bin" / "nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    release = re.search(r"release (\S+?),", nvcc).group(1)
    jobs = str(max_jobs(cpus(), budget_for(apex_component)))
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])  # the environment's ninja
    env = {**os.environ, "PATH": path, "MAX_JOBS": jobs, "CMAKE_BUILD_PARALLEL_LEVEL": jobs, "CUDA_HOME": str(home),
           **arch_env(list(stack.toolchain.archs)), **apex_component.build_env}
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    key = apex_key(ExtensionKey, apex_component, torch.__version__, torch.version.cuda or "", env["TORCH_CUDA_ARCH_LIST"], release, python)
    work = Path(tempfile.mkdtemp(prefix="ts-apex-"))
    cache, steps = WheelCache(work / ".extensions"), Steps(logs if logs is not None else work / "steps")
    settings = ", ".join(f"{k}={v}" for k, v in sorted(apex_component.build_env.items()))
    result = {"extension": f"apex {(apex_component.commit or '')[:12]} ({settings}; TORCH_CUDA_ARCH_LIST={env['TORCH_CUDA_ARCH_LIST']})",
              "commit": apex_component.commit, "python": python, "max_jobs": int(jobs), "cpus": cpus(), "nvcc": release,
              "torch": torch.__version__, "cuda_home": str(home), "key": key.digest()}
    wheel = None
    if logs is not None:  # what ninja has compiled so far, every 5 s: there even if the call is killed
        watch = threading.Thread(target=progress, args=(source / "build", logs / "progress.json"), daemon=True)
        watch.start()
    for run in ("cold", "cached"):
        start = time.perf_counter()
        try:
            wheel, record = build_wheel(steps, cache, key, name="apex", target=source, python=Path(sys.executable), env=env, out=work / "out")
        except TrainstackError as exc:
            result[run] = {"error": exc.message, "seconds": round(time.perf_counter() - start, 1), **log_errors(steps.root / "logs")}
            break
        except KeyboardInterrupt:  # the caller's time limit (timeout -s INT)
            result[run] = {"error": f"stopped by the time limit after {time.perf_counter() - start:.0f} s", "seconds": round(time.perf_counter() - start, 1)}
            break
        finally:
            if run == "cold":
                result["ninja"] = ninja_times(source / "build")
        result[run] = {"build_seconds": round(time.perf_counter() - start, 3), **record.model_dump()}
        if run == "cold":
            result["compiled_modules"] = sorted(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so"))
    if wheel is not None and wheels is not None:
        wheels.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, wheels / wheel.name)
    shutil.rmtree(work, ignore_errors=True)
    if "build_seconds" in result.get("cold", {}) and "build_seconds" in result.get("cached", {}):
        result["build_ratio_cold_over_cached"] = round(result["cold"]["build_seconds"] / max(result["cached"]["build_seconds"], 1e-3), 1)
    return result


def apex_key(key_type, component, torch_version: str, cuda: str, arch_list: str, nvcc: str, python: str):
    """The wheel-cache key of apex built in place: commit, torch, CUDA, GPU targets, nvcc, build_env, Python."""
    return key_type(package="apex", version=component.commit or "", torch=torch_version, cuda=cuda,
                    archs=f"TORCH_CUDA_ARCH_LIST={arch_list}", toolchain=(("nvcc", nvcc),),
                    build_env=tuple(sorted(component.build_env.items())), python=python)


def log_errors(logs: Path) -> dict:
    """The compiler's and Python's error lines of a failed compile step, and the log's last lines."""
    lines = [line for log in sorted(logs.glob("*compile-apex.log")) for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    errors = [line.strip() for line in lines if re.search(r"(\berror\b|Error:|FAILED:|fatal)", line) and "not an error" not in line]
    return {"error_lines": errors[:12], "log_tail": lines[-25:]}


def progress(build: Path, out: Path) -> None:
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:
        time.sleep(5)
        try:
            out.write_text(json.dumps({"elapsed_seconds": round(time.perf_counter() - start), **ninja_times(build)}) + "\n", encoding="utf-8")
        except OSError:
            return


def ninja_times(build: Path) -> dict:
    """Per translation unit compile seconds from ninja's own logs (.ninja_log: start and end in ms)."""
    units = []
    for log in sorted(build.rglob(".ninja_log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) == 5 and parts[0].isdigit() and parts[1].isdigit():
                units.append((Path(parts[3]).name, (int(parts[1]) - int(parts[0])) / 1000))
    units.sort(key=lambda u: -u[1])
    return {"units": len(units), "unit_seconds_sum": round(sum(s for _, s in units), 1),
            "slowest": [[name, round(s, 1)] for name, s in units[:12]]}


def cold_and_cached(text: str, name: str, component: str, python: str, wheels: Path | None) -> dict:
    """`trainstack lock` then `trainstack build` twice into one fresh build folder: cold (the
    wheel cache empty), then --force (the wheel cache hit); per run the build's own record."""
    work = Path(tempfile.mkdtemp(prefix="ts-extbench-"))
    stack = work / name
    stack.write_text(text, encoding="utf-8")
    flavour = f"cu130-ubuntu2404-py{python.replace('.', '')}-release"
    subprocess.run(["trainstack", "lock", str(stack), "--flavour", flavour], check=True)
    runs = {}
    for run, extra in (("cold", []), ("cached", ["--force"])):
        start = time.perf_counter()
        subprocess.run(["trainstack", "build", str(stack), "--flavour", flavour, "--build-dir", str(work / "build"), *extra], check=True)
        record = json.loads((work / "build" / flavour / "build.json").read_text())
        step = next(s for s in record["steps"] if s["name"] == f"compile-{component}")
        runs[run] = {"build_seconds": round(time.perf_counter() - start, 1), "compile_step_seconds": step["seconds"],
                     **record["extensions"][component]}
    if wheels is not None:
        wheels.mkdir(parents=True, exist_ok=True)
        for wheel in (work / "build" / ".extensions").glob(f"{component}-*/*.whl"):
            shutil.copy2(wheel, wheels / wheel.name)
    shutil.rmtree(work, ignore_errors=True)
    cold, cached = runs["cold"], runs["cached"]
    return {**runs, "compile_ratio_cold_over_cached": round(cold["compile_step_seconds"] / max(cached["compile_step_seconds"], 1e-3), 1),
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
    parser.add_argument("what", choices=["deepspeed", "apex", "flash-attn"])
    parser.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    parser.add_argument("--wheels", type=Path)
    parser.add_argument("--sdist", type=Path)
    parser.add_argument("--source", type=Path, help="apex: build this checkout in this environment")
    parser.add_argument("--git", help="apex: the repository to clone instead of the stack's URL")
    parser.add_argument("--logs", type=Path, help="apex --source: the build's step logs go here")
    parser.add_argument("--stack", type=Path, default=ROOT / "examples" / "stacks" / "apex-cuda.toml",
                        help="apex --source: the stack whose apex component (commit, build_env, jobs) and GPU targets to build")
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--where", default="this machine", help="recorded with the result")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.what == "deepspeed":
        result = deepspeed(args.python, args.wheels)
    elif args.what == "apex" and args.source is not None:
        result = apex_in_place(args.source, args.wheels, args.logs, args.stack)
    elif args.what == "apex":
        result = apex(args.git, args.wheels)
    else:
        result = flash_attn(args.sdist, args.seconds, args.jobs)
    result["where"] = args.where
    print(json.dumps(result, indent=1))
    previous = json.loads(args.out.read_text()) if args.out.is_file() else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(previous + [result], indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""flash-attn 2.8.3 for sm_90 built through trainstack's extension path, in as many runs as it
takes: each run resumes the last and stops itself before its deadline, keeping the objects.

    python3 benchmarks/flash_attn_build.py --sdist FILE --cache DIR --deadline-s 540 --out FILE [--jobs N]
        Builds the pinned sdist (sha256 checked) with trainstack.builder.extensions.build_wheel
        (uv build --no-build-isolation, torch's BuildExtension, ninja) into the wheel cache
        under DIR, with the stack's flash-attn settings (examples/stacks/torch-cuda.toml:
        FLASH_ATTENTION_FORCE_BUILD, FLASH_ATTN_CUDA_ARCHS=90) and TORCH_CUDA_ARCH_LIST=9.0,
        against this environment's torch and the nvcc of CUDA_HOME, NVCC_THREADS=1. MAX_JOBS
        is trainstack's bound (cores up to the stack's cap of 12, free memory at flash-attn's
        6 GiB a unit) unless --jobs. The build runs in a process group of its own; 20 s before --deadline-s it is
        interrupted (SIGINT, then SIGKILL), and the next run with the same DIR resumes from
        the units ninja finished. Each run prints units done/total every 30 s and at the end,
        with this run's compile-seconds and wall time, and appends its row to --out (JSON);
        the run that stores the wheel adds the wheel's size and the whole build's
        compile-seconds. The exit status is 0 when the wheel is built, 3 when units are left,
        7 when the build failed (its logs under DIR/runs/), 6 when this environment lacks a tool.
    python3 benchmarks/flash_attn_build.py --dry-run [--sdist FILE] --cache DIR --out FILE
        Everything up to the compile: the sdist (downloaded from PyPI when --sdist is not
        given), its units listed from its setup.py, the jobs bound, the key and what this
        environment lacks for a real run (a CUDA torch, nvcc, ninja, uv).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from trainstack.builder.cpu import available_memory, bound_jobs, effective_cpus, unit_memory  # noqa: E402
from trainstack.buildenv import budget_for  # noqa: E402
from trainstack.builder.extensions import ExtensionKey, WheelCache  # noqa: E402
from trainstack.buildenv import arch_env  # noqa: E402
from trainstack.builder.resume import ninja_units  # noqa: E402
from trainstack.fsutil import atomic_write_json  # noqa: E402
from trainstack.stackfile.load import load_stack  # noqa: E402
from trainstack.stackfile.schema import JobBudget  # noqa: E402

VERSION = "2.8.3"
SDIST = f"flash_attn-{VERSION}.tar.gz"
SHA256 = "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d"  # PyPI's, 8447812 bytes
INDEX = "https://pypi.org/simple"
ARCHS = ["90"]
STACK = ROOT / "examples" / "stacks" / "torch-cuda.toml"
GRACE_S = 20.0  # SIGINT this long before the deadline; SIGKILL what is left after it
PROGRESS_S = 30.0
EXIT_LEFT = 3


def fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def sdist_file(given: Path | None, cache: Path) -> Path:
    """The pinned sdist: the given file (its sha256 checked), else downloaded by trainstack's fetcher."""
    if given is None:
        from trainstack.builder.download import Fetcher, download_sdist

        cache.mkdir(parents=True, exist_ok=True)
        return download_sdist(Fetcher(), INDEX, "flash-attn", VERSION, [SHA256], cache)
    if not given.is_file():
        fail(f"--sdist: {given} is not a file; accepted: {SDIST} (sha256 {SHA256})")
    digest = hashlib.sha256(given.read_bytes()).hexdigest()
    if digest != SHA256:
        fail(f"--sdist: {given} has sha256 {digest}; accepted: {SDIST} with sha256 {SHA256}")
    return given


def source_tree(sdist: Path, cache: Path) -> Path:
    """The sdist unpacked once under DIR/source to list its units (tar's data filter: no links or paths out)."""
    final = cache / "source" / f"flash_attn-{VERSION}"
    if final.is_dir():
        return final
    staging = cache / "source.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(staging, filter="data")
    final.parent.mkdir(parents=True, exist_ok=True)
    (staging / final.name).rename(final)
    shutil.rmtree(staging, ignore_errors=True)
    return final


def listed_units(source: Path) -> list[str]:
    """The translation units flash_attn_2_cuda compiles, as its setup.py lists them."""
    text = (source / "setup.py").read_text(encoding="utf-8")
    return sorted(set(re.findall(r'"(csrc/flash_attn/[A-Za-z0-9_/]+\.(?:cu|cpp))"', text)))


def ninja_entries(kept_source: Path) -> dict[str, float]:
    """Output -> compile seconds of each unit ninja finished (the latest entry of .ninja_log)."""
    entries: dict[str, float] = {}
    for log in sorted(kept_source.glob("build/*/.ninja_log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) == 5 and parts[0].isdigit() and parts[1].isdigit():
                entries[f"{parts[3]}\t{parts[4]}"] = (int(parts[1]) - int(parts[0])) / 1000
    return entries


def environment() -> dict:
    """torch, its CUDA, the nvcc of CUDA_HOME and the tools of the build; 'missing' lists what a real run lacks."""
    missing = []
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME
    except ImportError:
        return {"missing": ["torch"], "notes": []}
    on_path = shutil.which("nvcc")
    home = os.environ.get("CUDA_HOME") or CUDA_HOME or (str(Path(os.path.realpath(on_path)).parent.parent) if on_path else None)
    nvcc = Path(home) / "bin" / "nvcc" if home else None
    release = None
    if nvcc is not None and nvcc.is_file():
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"release (\S+?),", out)
        release = found.group(1) if found else None
    notes = []
    if torch.version.cuda is None:  # a CPU torch has no CUDA_HOME for CUDAExtension
        missing.append(f"a CUDA build of torch (this one is {torch.__version__})")
    if release is None:
        missing.append("nvcc (set CUDA_HOME)")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    missing += [tool for tool in ("ninja", "uv") if shutil.which(tool, path=path) is None]
    for module in ("wheel", "packaging", "setuptools"):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"the Python package {module}")
    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_home": str(home) if home else None,
            "nvcc": release, "path": path, "missing": missing, "notes": notes}


def plan(args: argparse.Namespace, env_facts: dict) -> dict:
    component = load_stack(STACK).components["flash-attn"]
    # the stack's divisor of 8 stands in for memory with nvcc's 4 threads a job; here the memory
    # bound is explicit and each job has one thread, so the cores bound the jobs alone, to its cap
    budget = JobBudget(divisor=1, cap=budget_for(component).cap)
    bound = bound_jobs(effective_cpus(), budget, available_memory(), unit_memory(component))
    jobs = args.jobs if args.jobs is not None else bound.jobs
    build_env = {**component.build_env, "NVCC_THREADS": "1"}  # one GPU target: nvcc's threads have nothing to share
    env = {"PATH": env_facts.get("path", os.environ.get("PATH", "")), "MAX_JOBS": str(jobs),
           "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs), **arch_env(ARCHS), **build_env}
    if env_facts.get("cuda_home"):
        env.update({"CUDA_HOME": env_facts["cuda_home"], "CUDA_PATH": env_facts["cuda_home"]})
    arch_vars = ("TORCH_CUDA_ARCH_LIST", "FLASH_ATTN_CUDA_ARCHS")
    key = ExtensionKey(
        package="flash-attn", version=VERSION, torch=env_facts.get("torch") or "", cuda=env_facts.get("torch_cuda") or "",
        archs=";".join(f"{v}={env[v]}" for v in arch_vars if v in env), toolchain=(("nvcc", env_facts.get("nvcc") or ""),),
        build_env=tuple(sorted(build_env.items())), python=f"{sys.version_info[0]}.{sys.version_info[1]}",
    )  # fmt: skip
    return {"key": key, "env": env, "jobs": jobs, "bound": bound.text() if args.jobs is None else f"jobs: {jobs} (--jobs)"}


def worker(spec_path: Path) -> None:
    """The build itself, in its own process group: build_wheel into the cache, its record to a file."""
    from trainstack.builder.extensions import build_wheel
    from trainstack.builder.steps import Steps
    from trainstack.errors import TrainstackError

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    key = ExtensionKey(**{k: tuple(tuple(p) for p in v) if isinstance(v, list) else v for k, v in spec["key"].items()})
    cache = Path(spec["cache"])
    try:
        wheel, record = build_wheel(
            Steps(Path(spec["steps"])), WheelCache(cache / ".extensions"), key, name="flash-attn", target=Path(spec["source"]),
            python=Path(sys.executable), env=spec["env"], out=cache / "out",
        )  # fmt: skip
    except TrainstackError as exc:
        print(f"error: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), file=sys.stderr)
        raise SystemExit(7) from None
    except KeyboardInterrupt:  # the deadline: ninja keeps what it finished
        raise SystemExit(130) from None
    atomic_write_json(Path(spec["record"]), {**record.model_dump(), "path": str(wheel)})


def run_build(args: argparse.Namespace, sdist: Path, planned: dict, start: float) -> dict:
    """One run: the sdist built as `trainstack build` builds a source = "sdist" component (the
    archive handed to build_wheel, unpacked into the kept folder once), stopped before the deadline."""
    cache: Path = args.cache
    key: ExtensionKey = planned["key"]
    wheels = WheelCache(cache / ".extensions")
    kept_source = wheels.kept_folder(key) / "src"
    before = ninja_entries(kept_source)
    run_index = len(list(cache.glob("runs/run-*"))) + 1
    run_dir = cache / "runs" / f"run-{run_index:02d}"
    run_dir.mkdir(parents=True)
    spec = {"key": json.loads(json.dumps(asdict(key))), "cache": str(cache), "source": str(sdist.absolute()), "env": planned["env"],
            "steps": str(run_dir), "record": str(run_dir / "record.json")}
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    child = subprocess.Popen([sys.executable, __file__, "--worker", str(run_dir / "spec.json")], start_new_session=True)
    stop_at = start + args.deadline_s - GRACE_S
    interrupted = False
    last_print = 0.0
    while child.poll() is None:
        now = time.monotonic()
        if now >= stop_at and not interrupted:
            print(f"deadline: interrupting the build {args.deadline_s - (now - start):.0f} s before --deadline-s", flush=True)
            os.killpg(child.pid, signal.SIGINT)  # ninja stops its compilers; finished units stay logged
            interrupted = True
        if interrupted and now >= stop_at + max(GRACE_S - 5, GRACE_S / 2):  # the worker's last object poll has run
            os.killpg(child.pid, signal.SIGKILL)
        if now - last_print >= PROGRESS_S:
            units = ninja_units(kept_source)
            if units is not None:
                print(f"  units {units.done}/{units.total} after {now - start:.0f} s", flush=True)
            last_print = now
        time.sleep(1.0)
    try:
        os.killpg(child.pid, signal.SIGKILL)  # anything the build left running in its group
    except ProcessLookupError:
        pass
    after = ninja_entries(kept_source) if kept_source.is_dir() else {}
    record_file = run_dir / "record.json"
    record = json.loads(record_file.read_text(encoding="utf-8")) if record_file.is_file() else None
    new = {entry: s for entry, s in after.items() if entry not in before}
    row = {"run": run_index, "wall_seconds": round(time.monotonic() - start, 1), "exit": child.returncode,
           "interrupted": interrupted, "units_compiled_this_run": len(new), "compile_seconds_this_run": round(sum(new.values()), 1),
           "finished": record is not None}  # fmt: skip
    if record is None and not interrupted:  # a compile error, not the deadline: its logs say which
        row["failed"] = f"the build stopped with exit {child.returncode}; its logs in {run_dir / 'logs'}"
    units = ninja_units(kept_source)
    if units is not None:
        row.update(units_done=units.done, units_total=units.total, compile_seconds_so_far=round(units.seconds, 1))
    if record is not None:  # the kept folder is gone with the stored wheel: the record counts for it
        wheel = Path(record["path"])
        total = record["unit_seconds"] or 0.0
        row.update(units_done=record["units"], units_total=record["units"], units_resumed=record["units_resumed"],
                   units_compiled_this_run=(record["units"] or 0) - (record["units_resumed"] or 0),
                   compile_seconds_this_run=round(max(0.0, total - sum(before.values())), 1), compile_seconds_total=round(total, 1),
                   wheel=wheel.name, wheel_bytes=wheel.stat().st_size, wheel_path=str(wheel))  # fmt: skip
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help=f"the pre-downloaded {SDIST} (no network needed)")
    parser.add_argument("--cache", type=Path, default=ROOT / "build" / "flash-attn", help="kept between runs: wheel cache, objects, logs")
    parser.add_argument("--deadline-s", type=float, default=540.0, help="this run ends before this many seconds")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "flash_attn_build" / "flash_attn_build.json")
    parser.add_argument("--jobs", type=int, help="MAX_JOBS instead of trainstack's bound")
    parser.add_argument("--dry-run", action="store_true", help="everything up to the compile")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker)
        return
    if args.deadline_s <= GRACE_S + 10:
        fail(f"--deadline-s: {args.deadline_s:g} leaves no time to build; accepted: more than {GRACE_S + 10:g} seconds")
    if args.jobs is not None and args.jobs < 1:
        fail(f"--jobs: {args.jobs}; accepted: 1 or more")
    start = time.monotonic()
    from resultfile import Run

    meta = Run("flash_attn_build").meta
    args.cache = args.cache.absolute()
    sdist = sdist_file(args.sdist, args.cache)
    source = source_tree(sdist, args.cache)
    units = listed_units(source)
    facts = environment()
    planned = plan(args, facts)
    key: ExtensionKey = planned["key"]
    print(f"flash-attn {VERSION} ({sdist.name}, sha256 {SHA256[:12]}): {len(units)} units "
          f"({sum(u.endswith('.cu') for u in units)} CUDA, {sum(u.endswith('.cpp') for u in units)} C++) for sm_90")
    print(f"flash-attn: {planned['bound']}; key {key.digest()}; cache {args.cache}")
    row: dict = {**meta, "extension": f"flash-attn {VERSION} (sm_90)", "key": key.digest(), "jobs": planned["jobs"],
                 "jobs_bound": planned["bound"], "units_listed": len(units), "torch": facts.get("torch"),
                 "nvcc": facts.get("nvcc"), "deadline_s": args.deadline_s}  # fmt: skip
    for note in facts.get("notes", []):
        print(f"note: {note}")
    found = WheelCache(args.cache / ".extensions").lookup(key)
    if args.dry_run:
        kept = WheelCache(args.cache / ".extensions").kept_folder(key) / "src"
        done = ninja_units(kept)
        row.update(dry_run=True, missing=facts["missing"], notes=facts["notes"], units=units, cached_wheel=str(found[0]) if found else None,
                   units_done=done.done if done else 0)  # fmt: skip
        print("missing for a real run: " + (", ".join(facts["missing"]) or "nothing"))
    elif facts["missing"]:
        fail("this environment cannot build flash-attn: missing " + ", ".join(facts["missing"]), code=6)
    elif found is not None:
        wheel = found[0]
        row.update(finished=True, wheel=wheel.name, wheel_bytes=wheel.stat().st_size, wheel_path=str(wheel), cache="hit")
    else:
        row.update(notes=facts["notes"], **run_build(args, sdist, planned, start))
    row["wall_seconds"] = round(time.monotonic() - start, 1)
    left = f"{row['units_done']}/{row['units_total']} units" if "units_total" in row else "no units started"
    print(f"flash-attn: {'built' if row.get('finished') else 'not finished'}: {left}, "
          f"this run compiled {row.get('units_compiled_this_run', 0)} in {row.get('compile_seconds_this_run', 0)} compile-seconds, "
          f"wall {row['wall_seconds']} s" + (f"; wheel {row['wheel']} {row['wheel_bytes'] / 2**20:.1f} MiB" if row.get("wheel") else ""))
    previous = []
    if args.out.is_file():
        try:
            previous = json.loads(args.out.read_text(encoding="utf-8"))
        except ValueError:
            previous = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, (previous if isinstance(previous, list) else []) + [row])
    if row.get("failed"):
        fail(row["failed"], code=7)
    if not args.dry_run and not row.get("finished"):
        raise SystemExit(EXIT_LEFT)


if __name__ == "__main__":
    main()

"""Collect the environment report: the probe's facts from inside the target, compilers,
GPUs (NVML), lock drift and build-time facts, mapped onto the fixed schema."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from trainstack import proc
from trainstack.fsutil import loads_strict, read_regular
from trainstack.verify.drift import compute_drift, same_version
from trainstack.verify.gpus import read_gpus
from trainstack.verify.linkcheck.loaded import missing_dlopens
from trainstack.verify.probes.report_probe import ALLOC_ENV
from trainstack.verify.report_schema import (
    NOT_FOUND,
    BuildFact,
    BuildFacts,
    Compiler,
    Drift,
    EnvReport,
    GpuInfo,
    LibcInfo,
    LibraryInfo,
    OsInfo,
    PythonInfo,
    TorchInfo,
)
from trainstack.verify.target import Target, run_probe

COMPILERS = {"cc": ("cc", "gcc", "clang"), "c++": ("c++", "g++", "clang++"), "nvcc": ("nvcc",)}


def collect_report(
    target: Target,
    *,
    locked: tuple[str, dict[str, str]] | None = None,
    build_record: Path | None = None,
    gpus: GpuInfo | None = None,
    also: dict[str, str] | None = None,
) -> EnvReport:
    """``locked``: (label, {package: version}) from the lock manifest, when there is one;
    ``also``: what the stack installs beyond it (verify.drift.compute_drift)."""
    raw, reason = run_probe(target, "report_probe.py", timeout=300)
    if raw is None:
        # importing torch can take the interpreter down; report the rest without it
        raw, second = run_probe(target, "report_probe.py", ["--no-torch", f"torch import crashed: {reason}"])
        if raw is None:
            raw = {"errors": {"probe": f"{reason}; without torch: {second}"}}
    if not isinstance(raw, dict):
        raw = {"errors": {"probe": f"report_probe.py printed a JSON {type(raw).__name__}, not an object"}}
    report = from_probe(raw, str(target.python), find_compilers(target), gpus if gpus is not None else read_gpus())
    missing = missing_dlopens(_loaded(report))
    if missing:
        report.errors["dlopen-missing"] = "; ".join(missing)
    if locked is not None:
        report.drift = compute_drift(locked[1], report.packages, locked[0], also)
    report.build = build_facts(build_record, report)
    return report


def _loaded(report: EnvReport) -> list[str]:
    """Every library path the probe saw mapped (cuDNN, NCCL, CUDA runtime and cuBLAS)."""
    found: list[str] = []
    for paths in (report.cudnn.loaded, report.nccl.loaded, report.cuda_libraries):
        found += paths if isinstance(paths, list) else []
    return found


def from_probe(raw: dict[str, Any], target: str, compilers: dict[str, Compiler], gpus: GpuInfo) -> EnvReport:
    """Pure: the probe's JSON (as report_probe.py prints it) on the fixed schema."""
    installed = {canonicalize_name(k): v for k, v in (raw.get("packages") or {}).items()}
    return EnvReport(
        target=target,
        os=OsInfo(**_present(raw.get("os"))),
        libc=LibcInfo(**_present(raw.get("libc"))),
        compilers=compilers,
        python=PythonInfo(**_present(raw.get("python"), drop=("base_prefix",))),
        torch=_torch(raw.get("torch")),
        cudnn=_library(raw.get("cudnn")),
        nccl=_library(raw.get("nccl")),
        cuda_libraries=(raw.get("nccl") or {}).get("cuda_loaded") or NOT_FOUND,
        gpus=gpus,
        allocator_env={name: (raw.get("env") or {}).get(name, "not set") for name in ALLOC_ENV},
        packages=dict(sorted(installed.items())),
        errors=raw.get("errors") or {},
        drift=Drift(lock="not found: no lock manifest for this target"),
    )


def _present(section: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """The probe's section without null values and keys the schema does not carry."""
    if not isinstance(section, dict):
        return {}
    return {k: v for k, v in section.items() if v is not None and k not in drop}


def _torch(raw: Any) -> TorchInfo:
    if not isinstance(raw, dict):
        return TorchInfo()
    devices = [f"{d['name']} (sm_{d['capability'].replace('.', '')})" for d in raw.get("devices", [])]
    return TorchInfo(
        version=raw.get("version") or NOT_FOUND,
        path=raw.get("path") or NOT_FOUND,
        cuda=raw.get("cuda") or NOT_FOUND,
        rocm=raw.get("hip") or NOT_FOUND,
        arch_list=raw.get("arch_list") or NOT_FOUND,
        cuda_available=bool(raw.get("cuda_available")),
        devices=devices,
    )


def _library(raw: Any) -> LibraryInfo:
    if not isinstance(raw, dict):
        return LibraryInfo()
    return LibraryInfo(
        compiled=raw.get("compiled") or NOT_FOUND,
        runtime=raw.get("runtime") or NOT_FOUND,
        loaded=raw.get("loaded") or NOT_FOUND,
    )


def find_compilers(target: Target) -> dict[str, Compiler]:
    """cc, c++ and nvcc as the target's PATH (its bin first) finds them, with their versions and
    whose each is. nvcc is looked for first in the environment's own toolchain wheels
    (site-packages/nvidia/*/bin/nvcc), then in CUDA_HOME, then on the host's PATH."""
    search = target.env()["PATH"]
    found: dict[str, Compiler] = {}
    for role, names in COMPILERS.items():
        path = next((p for p in (shutil.which(n, path=search) for n in names) if p), None)
        owner = _owner(target, path)
        if role == "nvcc" and owner != "environment":
            wheel = _wheel_nvcc(target)
            if wheel is not None:
                path, owner = wheel, "environment"
            elif os.environ.get("CUDA_HOME") and (Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc").is_file():
                path, owner = str(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"), "CUDA_HOME"
        found[role] = Compiler(path=path, version=_version_of(path), owner=owner) if path else Compiler()
    return found


def _owner(target: Target, path: str | None) -> str:
    if path is None:
        return NOT_FOUND
    inside = Path(path).absolute().is_relative_to(target.prefix) or Path(path).parent == target.bin_dir
    return "environment" if inside else "host"


def _wheel_nvcc(target: Target) -> str | None:
    """The nvcc of the environment's CUDA toolchain wheels (nvidia/cuda_nvcc/bin, nvidia/cu13/bin)."""
    for site in target.site:
        nvidia = site / "nvidia"
        if not nvidia.is_dir():
            continue
        for folder in sorted(nvidia.iterdir())[:200]:
            candidate = folder / "bin" / "nvcc"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def _version_of(path: str) -> str:
    result = proc.run([path, "--version"], echo=False, timeout=30)
    text = result.stdout + result.stderr
    release = re.search(r"release (\d+\.\d+)", text)  # nvcc: "Cuda compilation tools, release 13.0, V13.0.88"
    if release:
        return release.group(1)
    first = text.strip().splitlines()
    return first[0].strip() if first else NOT_FOUND


def build_facts(record: Path | None, report: EnvReport) -> BuildFacts:
    """What build.json says the environment was built with, against what runs now."""
    if record is None or not record.is_file():
        return BuildFacts(record=f"not found: {record}" if record else NOT_FOUND)
    try:
        data = loads_strict(read_regular(record, "build record").decode("utf-8"))
    except (OSError, ValueError) as exc:
        return BuildFacts(record=f"{record}: unreadable ({exc})")
    if not isinstance(data, dict):
        return BuildFacts(record=f"{record}: unreadable (not a JSON object)")
    # the versions may sit at the top level, under "built_against" or among the tools
    sources = [data, data.get("built_against") or {}, data.get("tools") or {}]
    aliases = {"torch": ("torch",), "cuda": ("cuda", "nvcc"), "python": ("python",)}
    built = {name: next((str(src[key]) for src in sources for key in keys if src.get(key)), None) for name, keys in aliases.items()}
    runtime = {"torch": report.torch.version, "cuda": report.torch.cuda, "python": report.python.version}
    facts = [_fact(name, value, runtime[name]) for name, value in built.items() if value]
    return BuildFacts(record=str(record), facts=facts)


def _fact(name: str, built: str, runtime: str) -> BuildFact:
    built = str(built)
    if runtime == NOT_FOUND:
        return BuildFact(name=name, built=built, runtime=runtime, match=False)
    match = same_version(built, runtime) or _same_prefix(built, runtime)
    return BuildFact(name=name, built=built, runtime=runtime, match=match)


def _same_prefix(built: str, runtime: str) -> bool:
    """'13.0' built against, '13.0.88' reported (or the reverse): the same release."""
    a, b = built.split("."), runtime.split(".")
    n = min(len(a), len(b), 2)
    return n >= 2 and a[:n] == b[:n]

"""Compiled extensions built ahead of time: a CUDA home from the locked toolchain wheels, a probe
compile with it, the GPU targets as each package's variables, and a cache of built wheels.

A built wheel is keyed by what went into it (package version or commit, torch and CUDA, GPU
targets, toolchain pins, build environment, Python), so any flavour with the same key reuses
it instead of compiling again.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from trainstack import proc
from trainstack.buildenv import arch_env, budget_for, compiler_cache_env, nvcc_arch_flags, probe_arch
from trainstack.builder.cpu import available_memory, bound_jobs, unit_memory
from trainstack.builder.record import ExtensionKey, ExtensionRecord
from trainstack.builder.resume import KeptBuild, Units, ninja_units, refuse_links, toolchain_identity
from trainstack.builder.steps import Steps
from trainstack.console import err
from trainstack.errors import BuildError, ToolMissingError
from trainstack.fsutil import atomic_write_json, loads_strict, read_regular
from trainstack.hostnvcc import find_host_nvcc
from trainstack.lock.lockfile import parse_lock
from trainstack.rules.nvcc import no_route, venv_route, wheel_route
from trainstack.rules.toolchain import toolchain_rules

if TYPE_CHECKING:
    from trainstack.builder.backend import BuildJob
    from trainstack.lock.layers import FlavourLayers, SourceBuild
    from trainstack.rules.schema import Rules
    from trainstack.stackfile.schema import Component

PROBE_KERNEL = "__global__ void trainstack_probe(float* x) { x[threadIdx.x] *= 2.0f; }\n"
_TOOL_DIRS = ("bin", "include", "nvvm", "lib")


def cuda_home(venv: Path, dest: Path) -> Path | None:
    """A CUDA_HOME made of links into the toolchain's nvidia wheels: bin/nvcc, include, nvvm and a
    lib64 that also holds the unversioned libcudart.so the linker of an extension asks for.

    CUDA 13 wheels share one folder (nvidia/cu13); CUDA 12 wheels have one folder each
    (nvidia/cuda_nvcc, nvidia/cuda_runtime, ...), merged here. None without an nvcc wheel.
    """
    roots = sorted(p for p in venv.glob("lib/python*/site-packages/nvidia/*") if p.is_dir())
    if not any((root / "bin" / "nvcc").is_file() for root in roots):
        return None
    shutil.rmtree(dest, ignore_errors=True)
    for root in roots:
        for folder in _TOOL_DIRS:
            source = root / folder
            if source.is_dir():
                _link_entries(source, dest / ("lib64" if folder == "lib" else folder))
    lib = dest / "lib64"
    for versioned in sorted(lib.glob("lib*.so.*")) if lib.is_dir() else []:
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)
    return dest


def require_venv_nvcc(rules: Rules, layers: FlavourLayers) -> None:
    """Before a venv build downloads anything: a CUDA flavour that compiles extensions with no
    nvcc wheel of its CUDA needs the host's of that release; ToolMissingError naming the ways
    out (--skip-sources, --backend oci, CUDA_HOME) when the host has none."""
    flavour = layers.flavour
    if flavour.cuda == "cpu" or not layers.sources or wheel_route(rules, flavour.cuda) is not None:
        return
    host = find_host_nvcc()
    if venv_route(rules, flavour.cuda, host) is not None and host.home is not None:
        return
    sources = ", ".join(s.component.key for s in layers.sources)
    raise ToolMissingError(
        f"flavour {flavour.slug}: {no_route(rules, flavour.cuda, flavour.os, host)}; nothing was downloaded",
        hint=f"or build it without {sources} with --skip-sources, or as an image with "
        "--backend oci (trainstack check --backend oci says whether that can)",
    )


def host_cuda_home(rules: Rules, slug: str, cuda: str, os_name: str) -> Path:
    """The host's CUDA home when its nvcc is of release ``cuda`` (a venv build of a flavour whose
    CUDA has no nvcc wheel); BuildError in one line naming the flavour, the CUDA it needs, what
    was found and how to provide it otherwise."""
    host = find_host_nvcc()
    if venv_route(rules, cuda, host) is None or host.home is None:
        raise BuildError(f"flavour {slug}: {no_route(rules, cuda, os_name, host)}")
    return Path(host.home)


def _link_entries(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        link = target / entry.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry.resolve())


def probe_compile(steps: Steps, home: Path, arch: str, workdir: Path) -> None:
    """Compile a one-line kernel with the toolchain first, so a broken toolchain fails in seconds
    with nvcc's own error (BuildError), not after minutes of an extension's build."""
    workdir.mkdir(parents=True, exist_ok=True)
    kernel = workdir / "probe.cu"
    kernel.write_text(PROBE_KERNEL, encoding="utf-8")
    argv: list[str | Path] = [home / "bin" / "nvcc", *nvcc_arch_flags(arch), "-c", kernel, "-o", workdir / "probe.o"]
    name = f"nvcc-probe-sm_{arch}"
    log = steps.log_path(name)
    try:
        steps.run(name, argv, env={"PATH": f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"})
    except BuildError as exc:
        first = _first_error(log)
        raise BuildError(
            f"the locked CUDA toolchain cannot compile a kernel for sm_{arch}: {first or exc.message}",
            hint=f"every CUDA component must come from one release (trainstack check); full output in {log}",
        ) from None


def _first_error(log: Path) -> str:
    """nvcc's first error line ('ptxas ..., line 9; fatal : Unsupported .version 9.5; ...'), paths dropped."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    found = next((line for line in lines if re.search(r"\b(error|fatal)\b", line)), "")
    return re.sub(r"/\S*/(tmpxft_|probe)", r"\1", " ".join(found.split()))


def ccache_launch(home: Path | None, workdir: Path) -> tuple[Path | None, dict[str, str]]:
    """A folder of ccache links for the host compilers (to put first on PATH), and PYTORCH_NVCC
    (read by torch.utils.cpp_extension) routing nvcc through ccache; (None, {}) without ccache."""
    program = shutil.which("ccache")
    if program is None:
        return None, {}
    links = workdir / "ccache-bin"
    links.mkdir(parents=True, exist_ok=True)
    for name in ("cc", "c++", "gcc", "g++"):
        if not (links / name).is_symlink():
            (links / name).symlink_to(program)
    return links, ({"PYTORCH_NVCC": f"{program} {home / 'bin' / 'nvcc'}"} if home is not None else {})


def ccache_counts(env: dict[str, str]) -> dict[str, int]:
    """ccache's hit and miss counters (ccache --print-stats) in the cache dir of ``env``."""
    if shutil.which("ccache") is None or "CCACHE_DIR" not in env:
        return {}
    result = proc.run(["ccache", "--print-stats"], env=env, echo=False)
    counts = {}
    for line in result.stdout.splitlines() if result.ok else []:
        name, _, value = line.partition("\t")
        if value.strip().isdigit():
            counts[name.strip()] = int(value)
    return counts


def hit_rate(before: dict[str, int], after: dict[str, int]) -> float | None:
    def delta(name: str) -> int:
        return after.get(name, 0) - before.get(name, 0)

    hits = delta("direct_cache_hit") + delta("preprocessed_cache_hit")
    misses = delta("cache_miss")
    return round(hits / (hits + misses), 3) if hits + misses else None


class WheelCache:
    """build/.extensions/<package>-<key>/: one built wheel and the record of its build.

    Content-addressed on the way back out: build.json records the wheel's name and sha256, and a
    hit copies that wheel alone out of the entry, hashing it as it reads, into a folder of the
    flavour's own; the copy is what gets installed. A wheel swapped after the build, or another
    wheel placed beside it, is never installed: a wheel that differs from its record makes the
    entry a miss (removed, built again). No path of the cache is a link (refuse_links)."""

    def __init__(self, root: Path, build_root: Path | None = None) -> None:
        self.root = root
        self.build_root = build_root if build_root is not None else root.parent

    def folder(self, key: ExtensionKey) -> Path:
        return self.root / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', key.package)}-{key.digest()}"

    def kept_folder(self, key: ExtensionKey) -> Path:
        """Where an unfinished build of ``key`` keeps its source and objects (trainstack.builder.resume)."""
        folder = self.folder(key)
        return folder.with_name(folder.name + ".partial")

    def lookup(self, key: ExtensionKey, dest: Path) -> tuple[Path, dict] | None:
        """The recorded wheel of ``key``, copied into ``dest`` once its bytes match the recorded
        sha256, and the record; None on a miss (no entry, an entry of an older layout, or one whose
        wheel no longer matches: removed, with one line saying so)."""
        folder = self.folder(key)
        refuse_links(self.build_root, folder)
        try:
            meta = loads_strict(read_regular(folder / "build.json", "cache record", inside=folder, links=False).decode("utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        name, digest = (meta.get("wheel"), meta.get("sha256")) if isinstance(meta, dict) else (None, None)
        if not isinstance(name, str) or not isinstance(digest, str) or not _WHEEL_NAME.fullmatch(name):
            return None  # written before wheels were recorded by hash: built again
        if canonicalize_name(name.split("-", 1)[0]) != canonicalize_name(key.package):
            self._stale(key, f"its record names {name}, a wheel of another package than {key.package}")
            return None
        try:
            copy = _copy_hashed(folder / name, dest / name)
        except OSError as exc:
            self._stale(key, f"its wheel {name} cannot be read ({exc.strerror or exc})")
            return None
        if copy != digest:
            (dest / name).unlink(missing_ok=True)
            self._stale(key, f"its wheel {name} has sha256 {copy[:16]}..., not the {digest[:16]}... it was stored with")
            return None
        return dest / name, meta

    def _stale(self, key: ExtensionKey, why: str) -> None:
        folder = self.folder(key)
        err.print(f"extension cache: {folder.name}: {why}; building it again", highlight=False, markup=False)
        shutil.rmtree(folder, ignore_errors=True)
        return None

    def store(self, key: ExtensionKey, wheel: Path, meta: dict) -> Path:
        """Move ``wheel`` in under a staging name, then rename: a killed build leaves no half entry.
        The record names the wheel and its sha256, which a hit checks."""
        folder = self.folder(key)
        staging = folder.with_name(folder.name + f".tmp{os.getpid()}")
        refuse_links(self.build_root, folder, staging)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.move(str(wheel), staging / wheel.name)
        digest = _copy_hashed(staging / wheel.name, None)
        atomic_write_json(staging / "build.json", {**meta, "key": asdict(key), "wheel": wheel.name, "sha256": digest})
        refuse_links(self.build_root, folder)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        return folder / wheel.name


_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+!-]{1,200}\.whl\Z")  # a file name: no '/', never '..' alone


def _copy_hashed(source: Path, dest: Path | None) -> str:
    """The sha256 of regular file ``source`` (opened without following a link), its bytes copied to
    ``dest`` as they are hashed, so that what is installed is what was hashed."""
    digest = hashlib.sha256()
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as reader:
        if not stat.S_ISREG(os.fstat(reader.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if dest is not None:
            dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "wb") if dest is not None else contextlib.nullcontext() as writer:
            while chunk := reader.read(1 << 20):
                digest.update(chunk)
                if writer is not None:
                    writer.write(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class _WheelBuild:
    """What one extension's wheel is built from and where: step ``compile-<name>`` builds
    ``target`` (a source tree or archive) with ``python`` and ``env`` into the folder ``out``,
    with ``free_disk_gb`` free before it starts."""

    name: str
    target: Path | str
    python: Path
    env: dict[str, str]
    out: Path
    free_disk_gb: float | None = None


def build_wheel(
    steps: Steps,
    cache: WheelCache | None,
    key: ExtensionKey,
    *,
    name: str,
    target: Path | str,
    python: Path,
    env: dict[str, str],
    out: Path,
    free_disk_gb: float | None = None,
) -> tuple[Path, ExtensionRecord]:
    """The extension's wheel from the cache, or built now (uv build, no isolation: it compiles
    against the environment's torch) and stored. Step ``compile-<name>`` either way.

    A cached source tree is built in the cache's kept folder (trainstack.builder.resume), so a
    build stopped at any point goes on from the units ninja finished; the folder goes once the
    wheel is stored."""
    build = _WheelBuild(name, target, python, env, out, free_disk_gb)
    if cache is not None:
        _clear_wheels(out)
    found = cache.lookup(key, out) if cache is not None else None
    if found is not None and cache is not None:
        wheel, meta = found
        KeptBuild(cache.kept_folder(key), key, {}, cache.build_root).discard()  # left by a build killed right after storing
        steps.timed(f"compile-{build.name}", lambda: None, detail=f"cache hit {cache.folder(key).name}")
        record = ExtensionRecord(
            key=key.digest(),
            cache="hit",
            compile_seconds=0.0,
            ccache_hit_rate=None,
            wheel=wheel.name,
            wheel_bytes=wheel.stat().st_size,
        )
        return wheel, record
    if cache is None or not (Path(build.target).is_dir() or str(build.target).endswith((".tar.gz", ".zip"))):
        return _compile(steps, cache, key, build)
    kept = KeptBuild(cache.kept_folder(key), key, toolchain_identity({**os.environ, **build.env}), cache.build_root)
    with kept.held():
        earlier = kept.open(Path(build.target))
        if earlier is not None:
            err.print(
                f"{build.name}: resuming: {earlier.done} of {earlier.total} units compiled by an earlier run ({kept.folder.name})",
                highlight=False,
                markup=False,
            )
        with kept.recording():
            wheel, record = _compile(steps, cache, key, replace(build, target=kept.source), earlier=earlier)
        kept.discard()
    return wheel, record


def _compile(
    steps: Steps, cache: WheelCache | None, key: ExtensionKey, build: _WheelBuild, earlier: Units | None = None
) -> tuple[Path, ExtensionRecord]:
    name, target, env, out = build.name, build.target, build.env, build.out
    _clear_wheels(out)
    before = ccache_counts(env)
    start = time.perf_counter()
    steps.run(
        f"compile-{name}",
        ["uv", "build", "--wheel", "--no-build-isolation", "--python", build.python, "--out-dir", out, target],
        env=env,
        free_disk_gb=build.free_disk_gb,
    )
    seconds = round(time.perf_counter() - start, 3)
    rate = hit_rate(before, ccache_counts(env))
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"step compile-{name}: expected one wheel in {out}, found {len(wheels)}")
    units = ninja_units(Path(target)) if Path(target).is_dir() else None
    meta = {"compile_seconds": seconds, "ccache_hit_rate": rate}
    stored = cache.store(key, wheels[0], meta) if cache is not None else wheels[0]
    record = ExtensionRecord(
        key=key.digest(),
        cache="miss" if cache is not None else "off",
        compile_seconds=seconds,
        ccache_hit_rate=rate,
        wheel=stored.name,
        wheel_bytes=stored.stat().st_size,
        units=units.total if units is not None else None,
        units_resumed=earlier.done if earlier is not None else (0 if units is not None else None),
        unit_seconds=units.seconds if units is not None else None,
    )
    return stored, record


def _clear_wheels(out: Path) -> None:
    """``out`` made (or kept) empty of wheels: an interrupted run's, or a cache hit's copy."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.whl"):
        stale.unlink()


def toolchain_pins(pins: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The pins of the toolchain that matter to a compiled wheel: CUDA components and build tools."""
    names = {n for majors in toolchain_rules().release.components.values() for n in majors}
    return tuple(sorted((n, v) for n, v in pins.items() if n in names or n in ("ninja", "cmake", "setuptools")))


class ExtensionBuilder:
    """One flavour's source builds: the CUDA home and probe first, then each extension's wheel
    (cached) installed into the venv. ``records`` goes into build.json."""

    def __init__(self, job: BuildJob, steps: Steps, venv: Path) -> None:
        self.job, self.steps, self.venv = job, steps, venv
        self.work = job.staging / "src"
        self.cache = WheelCache(job.final.parent / ".extensions", job.final.parent)
        self.home: Path | None = None
        self.records: dict[str, ExtensionRecord] = {}

    @property
    def archs(self) -> list[str]:
        return list(self.job.inputs.stack.toolchain.archs)

    def prepare(self) -> None:
        """CUDA flavours: the CUDA home (the toolchain wheels', else the host's of the flavour's
        CUDA release: trainstack.rules.nvcc), and the probe compile."""
        flavour = self.job.layers.flavour
        if flavour.cuda == "cpu" or not self.job.inputs.stack.toolchain.nvcc:
            return
        rules = self.job.inputs.stack.rules_in_effect
        if wheel_route(rules, flavour.cuda) is not None:
            self.home = cuda_home(self.venv, self.work / "cuda-home")
            if self.home is None:
                raise BuildError(f"flavour {flavour.slug}: the toolchain layer installed no nvcc", hint="re-lock the stack")
        else:
            self.home = host_cuda_home(rules, flavour.slug, flavour.cuda, flavour.os)
        probe_compile(self.steps, self.home, probe_arch(rules, self.archs, flavour.cuda), self.work / "nvcc-probe")

    def compile_env(self, key: str, build_env: dict[str, str], python: Path, jobs: int | None = None) -> dict[str, str]:
        """MAX_JOBS (``jobs``, else the CPU budget's), the toolchain first on PATH, CUDA_HOME,
        the GPU targets, the compiler cache; the component's own build_env wins over all of them."""
        jobs_text = str(jobs if jobs is not None else self.job.max_jobs.get(key, 1))
        settings = self.job.inputs.stack.build.compiler_cache
        cache = compiler_cache_env(settings, self.job.final.parent, launcher=False, stack_folder=self.job.inputs.stack_path.parent)
        links, launch = ccache_launch(self.home, self.work) if "CCACHE_DIR" in cache else (None, {})
        path = [str(p) for p in (links, python.parent) if p is not None] + [os.environ.get("PATH", "")]
        env = {
            "VIRTUAL_ENV": str(self.venv),
            "PATH": os.pathsep.join(path),  # ccache's links, then the toolchain's ninja and cmake
            "MAX_JOBS": jobs_text,
            "CMAKE_BUILD_PARALLEL_LEVEL": jobs_text,
            **cache,
            **launch,
            **arch_env(self.archs),
        }
        if self.home is not None:
            env.update({"CUDA_HOME": str(self.home), "CUDA_PATH": str(self.home)})
        if self.home is not None and self.archs:
            # GPU targets named on a build machine without a GPU: else DeepSpeed picks its CPU accelerator
            env["DS_ACCELERATOR"] = "cuda"
        return {**env, **build_env}

    def jobs(self, comp: Component) -> int:
        """MAX_JOBS for ``comp``: its CPU budget, no more than free memory holds at its unit
        estimate, the bound printed; what build.json's max_jobs records."""
        if "MAX_JOBS" in comp.build_env:
            err.print(f"{comp.key}: jobs: {comp.build_env['MAX_JOBS']} (MAX_JOBS in its build_env)", highlight=False, markup=False)
            return self.job.max_jobs.get(comp.key, 1)
        bound = bound_jobs(self.job.cpus, budget_for(comp), available_memory(), unit_memory(comp))
        err.print(f"{comp.key}: {bound.text()}", highlight=False, markup=False)
        self.job.max_jobs[comp.key] = bound.jobs
        return bound.jobs

    def key(self, src: SourceBuild, env: dict[str, str]) -> ExtensionKey:
        comp, layers = src.component, self.job.layers
        if comp.commit:
            version = comp.commit
        else:
            version = parse_lock(src.entry_text).entries[0].version or "" if src.entry_text else ""
        toolchain = {e.name: e.version or "" for e in layers.toolchain.entries}
        arch_vars = ("TORCH_CUDA_ARCH_LIST", "FLASH_ATTN_CUDA_ARCHS")
        return ExtensionKey(
            package=comp.name,
            version=version,
            torch=layers.locked.packages.get("torch", ""),
            cuda=layers.flavour.cuda,
            archs=";".join(f"{v}={env[v]}" for v in arch_vars if v in env),
            toolchain=toolchain_pins(toolchain),
            build_env=tuple(sorted(comp.build_env.items())),
            python=layers.flavour.python,
        )

    def build(self, src: SourceBuild, target: Path | str, python: Path, env: dict[str, str], free_disk_gb: float) -> None:
        comp = src.component
        compile_env = {**env, **self.compile_env(comp.key, comp.build_env, python, self.jobs(comp))}
        key = self.key(src, compile_env)
        # a local path can change under the same version: built every time, never cached
        cache = self.cache if comp.path is None else None
        wheel, record = build_wheel(
            self.steps,
            cache,
            key,
            name=comp.key,
            target=target,
            python=python,
            env=compile_env,
            out=self.work / "wheels" / comp.key,
            free_disk_gb=free_disk_gb,
        )
        self.steps.run(
            f"install-{comp.key}",
            ["uv", "pip", "install", "--python", python, "--no-deps", "--reinstall-package", comp.name, wheel],
            env=env,
        )
        self.records[comp.key] = record

"""A CUDA 12.4 extension compiled for sm_90 by Debian 13's nvcc, on a machine without a GPU.

    sudo python3 benchmarks/cuda12_toolchain.py [--root DIR] [--keep]

PyPI's CUDA 12 nvcc wheels hold only ptxas, so a cu124 flavour takes its nvcc from elsewhere:
here from Debian 13 (trixie), whose non-free archive packages nvidia-cuda-toolkit 12.4.131.
The script makes a Debian 13 root with debootstrap (or reuses --root), enables the archive
component trainstack's rules name and installs the toolkit pinned to the version they name,
with g++ and python3-dev; then, inside the root (chroot), a venv with PyPI's torch 2.5.1 (a
cu124 build) and this checkout of trainstack, and there it:

  1. finds the host's nvcc (trainstack.hostnvcc) and takes it as the venv route of a cu124
     flavour only if trainstack.rules.nvcc says so (release 12.4 == the flavour's CUDA);
  2. compiles the probe kernel for sm_90 (trainstack.builder.extensions.probe_compile);
  3. builds a CUDA extension of two .cu units and one .cpp unit for sm_90 through
     trainstack.builder.extensions.build_wheel (uv build, torch's cpp_extension, ninja);
  4. reads the .so's fatbin with trainstack.verify.fatbin and imports the module;
  5. unless --skip-build, runs `trainstack build examples/stacks/deepspeed-cuda12-debian.toml
     --backend venv` there (a cu124 flavour on debian13: DeepSpeed's fused Adam, one .cu and
     one .cpp unit, for sm_90) and reads the fatbin of the op's .so in the built venv.

Versions, units, compile seconds, wall time and fatbin archs go to
benchmarks/results/cuda12_toolchain/ (result.json, README.md). Needs root (debootstrap,
chroot, mounts) and the network (Debian's archive, PyPI).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resultfile import RESULTS, ROOT, Run  # noqa: E402

SUITE = "trixie"
OS_NAME = "debian13"
CUDA = "12.4"
TORCH = "2.5.1"
ARCH = "90"
MIRROR = "http://deb.debian.org/debian"
CHECKOUT = "/root/trainstack"
VENV = "/opt/venv"
WORK = "/root/cuda12-work"
BUILD_DIR = "/root/cuda12-build"
EXAMPLE = "examples/stacks/deepspeed-cuda12-debian.toml"
OUT = RESULTS / "cuda12_toolchain"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PASSED_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")

# two CUDA units and a binding unit: torch's cpp_extension compiles each with ninja
SCALE_CU = """\
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scale_kernel(float* x, float factor, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

void scale_cuda(torch::Tensor x, double factor) {
  int64_t n = x.numel();
  int threads = 256;
  int blocks = (int)((n + threads - 1) / threads);
  scale_kernel<<<blocks, threads>>>(x.data_ptr<float>(), (float)factor, n);
}
"""
AXPY_CU = """\
#include <torch/extension.h>
#include <cuda_fp16.h>

// torch builds extensions with __CUDA_NO_HALF_CONVERSIONS__: half <-> float spelled out
__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(__half* p, float v) { *p = __float2half(v); }

template <typename T>
__global__ void axpy_kernel(const T* x, T* y, float a, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) store(y + i, to_float(y[i]) + a * to_float(x[i]));
}

void axpy_cuda(torch::Tensor x, torch::Tensor y, double a) {
  int64_t n = x.numel();
  int threads = 256;
  int blocks = (int)((n + threads - 1) / threads);
  if (x.scalar_type() == torch::kHalf) {
    axpy_kernel<__half><<<blocks, threads>>>(
        reinterpret_cast<const __half*>(x.data_ptr<at::Half>()), reinterpret_cast<__half*>(y.data_ptr<at::Half>()), (float)a, n);
  } else {
    axpy_kernel<float><<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)a, n);
  }
}
"""
BINDING_CPP = """\
#include <torch/extension.h>

void scale_cuda(torch::Tensor x, double factor);
void axpy_cuda(torch::Tensor x, torch::Tensor y, double a);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale_cuda, "x *= factor (CUDA)");
  m.def("axpy", &axpy_cuda, "y += a * x (CUDA, float or half)");
}
"""
SETUP_PY = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="cuda12-demo",
    version="1.0",
    ext_modules=[CUDAExtension("cuda12_demo", ["binding.cpp", "scale.cu", "axpy.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
"""


def sh(argv: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, text=True, capture_output=True, **kwargs)


def chroot_env() -> dict[str, str]:
    """A clean environment, the proxy variables of this one, and the host's CA bundle (copied into
    the root: uv's built-in roots do not hold a TLS-intercepting proxy's CA)."""
    env = {"PATH": f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "LANG": "C.UTF-8", "TERM": "dumb", "DEBIAN_FRONTEND": "noninteractive", "SSL_CERT_FILE": str(CA_BUNDLE)}
    return env | {k: v for k, v in os.environ.items() if k in PASSED_VARIABLES}


def in_root(root: Path, command: str, timeout: float = 3600) -> tuple[float, str]:
    """``command`` with bash inside the root; (seconds, output); exits on failure with the last output."""
    start = time.perf_counter()
    done = subprocess.run(["chroot", str(root), "/bin/bash", "-c", command], env=chroot_env(), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    seconds = round(time.perf_counter() - start, 1)
    print(f"  {seconds:7.1f} s  {command[:110]}", flush=True)
    if done.returncode != 0:
        sys.exit(f"in the root: {command!r} exited {done.returncode}:\n{done.stdout[-3000:]}")
    return seconds, done.stdout


class Mounted:
    """/proc, /sys and /dev of the host in the root (a chroot needs them), unmounted after."""

    def __init__(self, root: Path) -> None:
        self.points = [(root / "proc", ["-t", "proc", "proc"]), (root / "sys", ["-t", "sysfs", "sysfs"]),
                       (root / "dev", ["--rbind", "/dev"])]
        self.done: list[Path] = []

    def __enter__(self) -> Mounted:
        for target, how in self.points:
            if os.path.ismount(target):
                continue
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", *how, str(target)], check=True)
            self.done.append(target)
        return self

    def __exit__(self, *exc: object) -> None:
        for target in reversed(self.done):
            subprocess.run(["umount", "-R", "-l", str(target)], check=False)


def outer(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        sys.exit("needs root: debootstrap, chroot and mounts")
    from trainstack.rules import shipped_rules
    from trainstack.rules.nvcc import debian_route

    route = debian_route(shipped_rules(), CUDA, OS_NAME)
    if route is None or route.debian is None:
        sys.exit(f"the rules name no Debian toolkit of CUDA {CUDA} for {OS_NAME}")
    debian = shipped_rules().cuda.debian
    package = f"{debian.package}={route.debian.version}"
    record = Run("cuda12_toolchain")
    wall = time.perf_counter()
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="cuda12-root-"))
    steps: dict[str, float] = {}
    if not (root / "etc" / "debian_version").is_file():
        print(f"debootstrap {route.debian.suite} into {root}", flush=True)
        start = time.perf_counter()
        made = sh(["debootstrap", "--variant=minbase", "--include=python3,ca-certificates", route.debian.suite,
                   str(root), MIRROR])
        if made.returncode != 0:
            sys.exit(f"debootstrap failed ({made.returncode}):\n{made.stderr[-2000:]}")
        steps["debootstrap"] = round(time.perf_counter() - start, 1)
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    uv = shutil.which("uv")
    if uv is None:
        sys.exit("needs uv on PATH (copied into the root)")
    shutil.copy(uv, root / "usr" / "local" / "bin" / "uv")
    checkout = root / CHECKOUT.lstrip("/")
    shutil.rmtree(checkout, ignore_errors=True)
    checkout.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive, check=True)
    component = debian.component
    enable = f"/{component}( |$)/! s/^(Components: .*main.*|deb .* main.*)$/\\1 {component}/"
    with Mounted(root):
        steps["enable-" + component], _ = in_root(
            root, "for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources; do "
                  f"if [ -f \"$f\" ]; then sed -i -E '{enable}' \"$f\"; fi; done")
        steps["apt-install"], _ = in_root(
            root, f"apt-get update -qq && apt-get install -y -qq --no-install-recommends '{package}' g++ python3-dev")
        shutil.copyfile(CA_BUNDLE, root / CA_BUNDLE.relative_to("/"))
        steps["venv"], _ = in_root(
            root, f"[ -x {VENV}/bin/python ] || uv venv -q --python /usr/bin/python3 {VENV}; "
                  f"uv pip install -q --python {VENV}/bin/python --reinstall-package trainstack "
                  f"torch=={TORCH} setuptools ninja wheel packaging {CHECKOUT}")
        _, output = in_root(root, f"python {CHECKOUT}/benchmarks/cuda12_toolchain.py --inner", timeout=7200)
        result = json.loads(output.strip().splitlines()[-1])
        if not args.skip_build:
            seconds, _ = in_root(root, f"rm -rf {BUILD_DIR} && cd {CHECKOUT} && trainstack build {EXAMPLE} "
                                       f"--backend venv --build-dir {BUILD_DIR}", timeout=7200)
            _, output = in_root(root, f"python {CHECKOUT}/benchmarks/cuda12_toolchain.py --read-build")
            result["trainstack_build"] = {"seconds": seconds, **json.loads(output.strip().splitlines()[-1])}
    result["host_steps_seconds"] = steps
    result["wall_seconds"] = round(time.perf_counter() - wall, 1)
    result["debian_package"] = package
    result["suite"] = route.debian.suite
    result["root"] = "made by this run (debootstrap)" if "debootstrap" in steps else "reused (--root): made earlier by the same steps"
    if args.root:  # the results name no folder of this machine
        record.meta["command"] = record.meta["command"].replace(args.root, "ROOT")
    write(record, result)
    if not args.keep and not args.root:
        shutil.rmtree(root, ignore_errors=True)
    built = result.get("trainstack_build", {"fatbin": {"sm": [ARCH]}})
    return 0 if result["fatbin"]["sm"] == [ARCH] and built["fatbin"]["sm"] == [ARCH] else 1


def inner() -> int:
    """Inside the root: route, probe, build_wheel, fatbin; one JSON line on stdout at the end."""
    import platform
    import zipfile

    import torch

    from trainstack.builder.extensions import ExtensionKey, WheelCache, build_wheel, host_cuda_home, probe_compile
    from trainstack.builder.steps import Steps
    from trainstack.hostnvcc import find_host_nvcc
    from trainstack.buildenv import arch_env
    from trainstack.rules import shipped_rules
    from trainstack.rules.nvcc import venv_route
    from trainstack.verify.fatbin import fatbin_archs

    rules = shipped_rules()
    work = Path(WORK)
    shutil.rmtree(work, ignore_errors=True)
    source = work / "src"
    source.mkdir(parents=True)
    for name, text in (("scale.cu", SCALE_CU), ("axpy.cu", AXPY_CU), ("binding.cpp", BINDING_CPP), ("setup.py", SETUP_PY)):
        (source / name).write_text(text, encoding="utf-8")
    host = find_host_nvcc()
    route = venv_route(rules, CUDA, host)
    if route is None or route.kind != "host":
        sys.exit(f"no venv route for CUDA {CUDA}: the host has {host.describe()}")
    slug = f"cu{CUDA.replace('.', '')}-{OS_NAME}-py{sys.version_info[0]}{sys.version_info[1]}-release"
    home = host_cuda_home(rules, slug, CUDA, OS_NAME)
    steps = Steps(work / "steps")
    start = time.perf_counter()
    probe_compile(steps, home, ARCH, work / "probe")
    probe_seconds = round(time.perf_counter() - start, 2)
    python = Path(sys.executable)
    env = {"CUDA_HOME": str(home), "MAX_JOBS": str(os.cpu_count() or 1),
           "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}", **arch_env([ARCH])}
    key = ExtensionKey(package="cuda12-demo", version="1.0", torch=torch.__version__, cuda=CUDA,
                       archs=f"TORCH_CUDA_ARCH_LIST={env['TORCH_CUDA_ARCH_LIST']}", toolchain=(("nvcc", host.cuda or ""),),
                       build_env=(), python=platform.python_version())
    start = time.perf_counter()
    wheel, record = build_wheel(steps, WheelCache(work / "cache"), key, name="cuda12-demo", target=source,
                                python=python, env=env, out=work / "out")
    build_seconds = round(time.perf_counter() - start, 1)
    unpacked = work / "unpacked"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    (library,) = sorted(unpacked.glob("cuda12_demo*.so"))
    archs = fatbin_archs(library)
    sys.path.insert(0, str(unpacked))
    import cuda12_demo  # noqa: E402  (loads without a GPU: the kernels run only when called on one)

    nvcc_version = subprocess.run([host.nvcc or "nvcc", "--version"], capture_output=True, text=True).stdout.strip()
    gcc = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    dpkg = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "nvidia-cuda-toolkit"], capture_output=True, text=True).stdout
    result = {
        "route": {"kind": route.kind, "text": route.text, "cuda_home": str(home)},
        "versions": {
            "debian": Path("/etc/debian_version").read_text().strip(),
            "nvidia_cuda_toolkit": dpkg,
            "nvcc": nvcc_version.splitlines()[-2] if nvcc_version else "",
            "host_cxx": gcc,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
        },
        "units": {"cu": 2, "cpp": 1, "ninja_total": record.units, "ninja_seconds": record.unit_seconds},
        "probe_seconds": probe_seconds,
        "compile_seconds": record.compile_seconds,
        "build_wheel_seconds": build_seconds,
        "max_jobs": env["MAX_JOBS"],
        "wheel": record.wheel,
        "wheel_bytes": record.wheel_bytes,
        "shared_object": library.name,
        "fatbin": {"sm": list(archs.sm) if archs else [], "ptx": list(archs.ptx) if archs else []},
        "imports": sorted(n for n in ("scale", "axpy") if hasattr(cuda12_demo, n)),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))
    return 0


def read_build() -> int:
    """Inside the root, after `trainstack build`: its record and the fatbin of DeepSpeed's fused Adam op."""
    from trainstack.verify.fatbin import fatbin_archs

    (flavour,) = [p for p in Path(BUILD_DIR).iterdir() if p.is_dir() and not p.name.startswith(".")]
    record = json.loads((flavour / "build.json").read_text())
    (library,) = sorted((flavour / "venv").glob("lib/python*/site-packages/deepspeed/ops/adam/fused_adam_op*.so"))
    archs = fatbin_archs(library)
    steps = {s["name"]: s["seconds"] for s in record.get("steps", [])}
    print(json.dumps({
        "flavour": flavour.name,
        "command": f"trainstack build {EXAMPLE} --backend venv --build-dir {BUILD_DIR}",
        "steps_seconds": {k: v for k, v in steps.items() if k.startswith(("nvcc-probe", "compile-", "install"))},
        "extensions": record.get("extensions", {}),
        "shared_object": library.name,
        "fatbin": {"sm": list(archs.sm) if archs else [], "ptx": list(archs.ptx) if archs else []},
    }))
    return 0


def write(record: Run, result: dict) -> None:
    from trainstack.fsutil import atomic_write_json, atomic_write_text

    OUT.mkdir(parents=True, exist_ok=True)
    meta = {**record.meta, "load": record.load_text()}
    atomic_write_json(OUT / "result.json", {**meta, "figures": result})
    v = result["versions"]
    lines = [
        "# A CUDA 12.4 extension compiled for sm_90 by Debian 13's nvcc",
        "",
        f"{record.header()}",
        "",
        f"- root: Debian {v['debian']} ({result['suite']}), {result['root']}: debootstrap minbase, the `non-free` component enabled,",
        f"  `{result['debian_package']}` installed as trainstack's rules pin it, with g++ and python3-dev",
        f"- nvcc: {v['nvcc']} (`{result['route']['text']}`, CUDA_HOME={result['route']['cuda_home']}); host C++: {v['host_cxx']}",
        f"- torch {v['torch']} from PyPI (CUDA {v['torch_cuda']}), Python {v['python']}",
        f"- extension: 2 .cu units (scale.cu, axpy.cu) and 1 .cpp unit through "
        f"`trainstack.builder.extensions.build_wheel` (ninja units: {result['units']['ninja_total']}), MAX_JOBS={result['max_jobs']}",
        f"- probe kernel (sm_90): {result['probe_seconds']} s; compile: {result['compile_seconds']} s "
        f"(ninja units' own seconds: {result['units']['ninja_seconds']}); wall of the whole run: {result['wall_seconds']} s",
        f"- host steps (s): {', '.join(f'{k} {s}' for k, s in result['host_steps_seconds'].items())}",
        f"- wheel: {result['wheel']} ({result['wheel_bytes']} bytes); `{result['shared_object']}` fatbin "
        f"(trainstack.verify.fatbin): sm {', '.join(result['fatbin']['sm']) or 'none'}; "
        f"ptx {', '.join(result['fatbin']['ptx']) or 'none'}",
        f"- the module imports on this GPU-less machine with functions: {', '.join(result['imports'])}",
    ]
    build = result.get("trainstack_build")
    if build:
        ext = build["extensions"].get("deepspeed", {})
        lines += [
            "",
            f"`{build['command']}` (flavour {build['flavour']}): {build['seconds']} s in all; steps (s): "
            + ", ".join(f"{k} {v}" for k, v in build["steps_seconds"].items()),
            f"- deepspeed's fused Adam (multi_tensor_adam.cu, fused_adam_frontend.cpp): "
            f"{ext.get('units') or 'no'} ninja units counted (built from the sdist archive), compile {ext.get('compile_seconds')} s, "
            f"`{build['shared_object']}` fatbin: sm {', '.join(build['fatbin']['sm']) or 'none'}; "
            f"ptx {', '.join(build['fatbin']['ptx']) or 'none'}",
        ]
    lines += ["", record.load_text(), ""]
    atomic_write_text(OUT / "README.md", "\n".join(lines))
    print(f"wrote {OUT.relative_to(ROOT)}/result.json and README.md")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="a Debian 13 root to use (made with debootstrap when empty)")
    parser.add_argument("--keep", action="store_true", help="keep the root made in a temporary folder")
    parser.add_argument("--skip-build", action="store_true", help="leave out the `trainstack build` of the example")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--read-build", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_build:
        return read_build()
    return inner() if args.inner else outer(args)


if __name__ == "__main__":
    sys.exit(main())

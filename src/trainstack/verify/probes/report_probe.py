"""Environment facts from inside the target interpreter, as one JSON document on stdout.

Standalone on purpose (stdlib only; torch is imported when present): run it as
``PYTHON -I report_probe.py``. Every section catches its own failure, so a broken
environment still reports what it can; failures are listed under "errors".
"""

import json
import os
import platform
import sys

NOT_FOUND = "not found"
ALLOC_ENV = (
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "CUDA_MODULE_LOADING",
    "CUDA_LAUNCH_BLOCKING",
    "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT",
    "NCCL_DEBUG",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
)
errors = {}  # type: dict[str, str]


def section(name):
    def wrap(fn):
        def run():
            try:
                return fn()
            except BaseException as exc:  # noqa: BLE001 - a broken env must not stop the report
                errors[name] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
                return None

        return run

    return wrap


@section("os")
def os_info():
    release = {}
    try:
        release = platform.freedesktop_os_release()
    except (AttributeError, OSError):
        pass
    return {
        "name": release.get("PRETTY_NAME", platform.system()),
        "kernel": platform.release(),
        "machine": platform.machine(),
    }


@section("libc")
def libc_info():
    name, version = platform.libc_ver()
    if not name:
        try:
            name, version = os.confstr("CS_GNU_LIBC_VERSION").split(" ", 1)
        except (ValueError, OSError, AttributeError):
            return None
    return {"name": name, "version": version}


@section("python")
def python_info():
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
        "is_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix),
    }


@section("packages")
def installed_packages():
    from importlib import metadata

    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name] = dist.version
    return found


def loaded_libraries(keywords):
    """Paths of mapped shared objects whose name holds one of ``keywords`` (from the memory map)."""
    paths = set()
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(None, 5)
                if len(parts) == 6 and ".so" in parts[5]:
                    path = parts[5].strip()
                    base = os.path.basename(path)
                    if any(base.startswith(k) for k in keywords):
                        paths.add(path)
    except OSError:
        return []
    return sorted(paths)


@section("torch")
def torch_info():
    import torch

    info = {
        "version": torch.__version__,
        "path": os.path.dirname(torch.__file__),
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "debug": bool(getattr(torch.version, "debug", False)),
        "arch_list": [],
        "cuda_available": False,
        "device_count": 0,
        "devices": [],
    }
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    if flags is not None:
        # compiled-in arch list; torch.cuda.get_arch_list() hides it when no GPU is present
        info["arch_list"] = (flags() or "").split()
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        info["device_count"] = torch.cuda.device_count() if info["cuda_available"] else 0
        for index in range(info["device_count"]):
            props = torch.cuda.get_device_properties(index)
            info["devices"].append({"name": props.name, "capability": "%d.%d" % (props.major, props.minor), "memory": props.total_memory})
    except Exception as exc:  # noqa: BLE001 - a broken CUDA setup is reported, not raised
        errors["torch.cuda"] = "%s: %s" % (type(exc).__name__, exc)
    return info


@section("cudnn")
def cudnn_info():
    import torch

    cudnn = getattr(torch._C, "_cudnn", None)
    info = {"compiled": None, "runtime": None}
    if cudnn is not None:
        info["compiled"] = ".".join(str(p) for p in cudnn.getCompileVersion())
        info["runtime"] = _cudnn_version_text(cudnn.getVersionInt())
        if torch.cuda.is_available():
            # creating a handle makes libcudnn load its sub-libraries, so the map shows them
            torch.backends.cudnn.enabled = True
            conv = torch.nn.Conv2d(1, 1, 3).cuda()
            conv(torch.zeros(1, 1, 8, 8, device="cuda"))
    info["loaded"] = loaded_libraries(("libcudnn",))
    return info


def _cudnn_version_text(value):
    # cuDNN 9: major*10000 + minor*100 + patch; cuDNN 8: major*1000 + minor*100 + patch
    if value >= 90000:
        return "%d.%d.%d" % (value // 10000, value % 10000 // 100, value % 100)
    return "%d.%d.%d" % (value // 1000, value % 1000 // 100, value % 100)


@section("nccl")
def nccl_info():
    import torch

    info = {"compiled": None, "runtime": None}
    if torch.cuda.is_available() or getattr(torch.version, "cuda", None):
        import torch.cuda.nccl as nccl

        version = nccl.version()
        info["runtime"] = ".".join(str(p) for p in version) if isinstance(version, tuple) else str(version)
        info["compiled"] = _pinned_requirement("torch", "nvidia-nccl")
    info["loaded"] = loaded_libraries(("libnccl",))
    info["cuda_loaded"] = loaded_libraries(("libcudart", "libcublas", "libcuda.so"))
    return info


def _pinned_requirement(dist, prefix):
    """The version a wheel pins for a dependency: what it was built against. Both spellings of
    Requires-Dist: 'nvidia-nccl-cu12==2.18.1; ...' and 'nvidia-nccl-cu12 (==2.18.1) ; ...'."""
    import re
    from importlib import metadata

    for req in metadata.requires(dist) or []:
        if req.lower().startswith(prefix):
            pinned = re.search(r"===?\s*([0-9][0-9A-Za-z.+!_-]*)", req.split(";")[0])
            if pinned:
                return pinned.group(1)
    return None


def main():
    report = {
        "os": os_info(),
        "libc": libc_info(),
        "python": python_info(),
        "packages": installed_packages(),
        "env": {name: os.environ[name] for name in ALLOC_ENV if name in os.environ},
    }
    if "--no-torch" in sys.argv:
        errors["torch"] = sys.argv[sys.argv.index("--no-torch") + 1]
    elif "torch" in {n.lower() for n in (report["packages"] or {})}:
        report["torch"] = torch_info()
        report["cudnn"] = cudnn_info() if report["torch"] else None
        report["nccl"] = nccl_info() if report["torch"] else None
    else:
        errors["torch"] = "torch not installed"
    report["errors"] = errors
    json.dump(report, sys.stdout, default=str)


if __name__ == "__main__":
    main()

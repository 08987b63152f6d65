"""One smoke check, run inside the target interpreter: ``PYTHON -I smoke_probe.py CHECK WORKDIR [COMPONENT...]``.

Standalone (stdlib, plus torch or numpy when installed). Prints one JSON line: a list of
{"name", "status": pass|fail|skip, "reason", "seconds"}, one entry per device the check
covers. GPU variants say "skip: no GPU" on a machine without one, never "pass".
"""

import importlib
import json
import math
import os
import random
import shutil
import sys
import time
import traceback


def result(name, status, reason, seconds=0.0):
    return {"name": name, "status": status, "reason": reason, "seconds": round(seconds, 3)}


def timed(name, fn):
    start = time.perf_counter()
    try:
        status, reason = fn()
    except Exception as exc:  # noqa: BLE001 - every failure becomes a "fail" with its reason
        status, reason = "fail", _cause(exc)
    return result(name, status, reason, time.perf_counter() - start)


# torch's advice lines after the cause of a failed compile, not part of it
ADVICE = (
    "Set TORCH_LOGS",
    "You can suppress",
    "For even more developer context",
    "Set TORCHDYNAMO_VERBOSE",
    "from user code:",
    "To execute this test",
)
MAX_REASON = 2000


def _cause(exc):
    """The whole cause in one line: each message of the chain ('BackendCompilerFailed:
    backend='inductor' raised: RuntimeError: ...'), torch's advice lines left out."""
    parts, seen = [], 0
    while exc is not None and seen < 8:
        lines = []
        for line in str(exc).strip().splitlines():
            if line.strip().startswith(ADVICE):
                break
            if line.strip():
                lines.append(line.strip())
        text = " ".join(lines) or _last_frame()
        parts.append("%s: %s" % (type(exc).__name__, text))
        # torch's BackendCompilerFailed already holds its cause's text; follow only bare re-raises
        nxt = exc.__cause__ or exc.__context__
        if nxt is not None and str(nxt).strip() and str(nxt).strip().splitlines()[0].strip() in text:
            break
        exc, seen = nxt, seen + 1
    return " <- ".join(parts)[:MAX_REASON]


def _last_frame():
    lines = traceback.format_exc().strip().splitlines()
    return lines[-1][:300] if lines else ""


def have(module):
    try:
        importlib.import_module(module)
        return True
    except Exception:  # noqa: BLE001 - a module that fails to import counts as absent here
        return False


def host_has_gpu():
    """An NVIDIA or AMD GPU device node, whether or not torch is here to use it."""
    if os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd"):
        return True
    try:
        return bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


def gpu_skip_reason():
    if not have("torch"):
        return "torch not installed" if host_has_gpu() else "no GPU"
    import torch

    if not torch.cuda.is_available():
        return "no GPU"
    return None


def per_device(check, cpu_fn, gpu_fn):
    results = []
    if not have("torch"):
        results.append(result(check + "[cpu]", "skip", "torch not installed"))
    else:
        results.append(timed(check + "[cpu]", cpu_fn))
    reason = gpu_skip_reason()
    if reason:
        results.append(result(check + "[gpu]", "skip", reason))
    else:
        results.append(timed(check + "[gpu]", gpu_fn))
    return results


# -- imports -------------------------------------------------------------------------------


def module_for(dist):
    from importlib import metadata

    wanted = dist.lower().replace("-", "_")
    modules = [
        m
        for m, dists in metadata.packages_distributions().items()
        if any(d.lower().replace("-", "_").replace(".", "_") == wanted for d in dists)
    ]
    if not modules:
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None
        return wanted  # installed without a RECORD or top_level.txt: try the usual module name
    if wanted in modules:
        return wanted
    public = sorted(m for m in modules if not m.startswith("_"))
    return (public or sorted(modules))[0]


def executables(dist):
    """The programs a distribution installs into the environment's bin (py-spy: bin/py-spy),
    as its RECORD lists them; at most 16."""
    from importlib import metadata

    found = []
    for entry in (metadata.files(dist) or [])[:20000]:
        if len(entry.parts) >= 2 and entry.parts[-2] in ("bin", "scripts") and not entry.name.endswith(".py"):
            path = os.path.abspath(str(entry.locate()))
            if os.path.isfile(path) and os.access(path, os.X_OK):
                found.append(path)
    return found[:16]


def check_imports(components):
    results = []
    for dist in components:
        programs = []

        def one(dist=dist, programs=programs):
            from importlib import util

            module = module_for(dist)
            if module is None:
                return "fail", "%s is not installed" % dist
            if util.find_spec(module) is None and executables(dist):
                # a binary-only package (py-spy): checked as its program, run by trainstack
                programs.extend(executables(dist))
                return "pass", "%s installs no module, only %s" % (dist, ", ".join(os.path.basename(p) for p in programs))
            importlib.import_module(module)
            return "pass", "import %s" % module

        item = timed("import " + dist, one)
        if programs:
            item["name"], item["run"] = "run " + dist, programs[0]
        results.append(item)
    return results


# -- matmul --------------------------------------------------------------------------------


def torch_matmul(device, dtype_name, tol):
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(512, 512, generator=gen)
    b = torch.randn(512, 512, generator=gen)
    reference = a.double() @ b.double()
    got = (a.to(device, getattr(torch, dtype_name)) @ b.to(device, getattr(torch, dtype_name))).double().cpu()
    error = ((got - reference).abs().max() / reference.abs().max()).item()
    if error > tol:
        return "fail", "relative error %.2e > %.0e against a float64 reference" % (error, tol)
    return "pass", "%s 512x512 on %s, relative error %.1e" % (dtype_name, device, error)


def numpy_matmul():
    import numpy

    rng = random.Random(0)
    n = 48
    a = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(n)]
    b = [[rng.uniform(-1, 1) for _ in range(n)] for _ in range(n)]
    reference = [[math.fsum(a[i][k] * b[k][j] for k in range(n)) for j in range(n)] for i in range(n)]
    got = numpy.array(a) @ numpy.array(b)
    error = float(numpy.max(numpy.abs(got - numpy.array(reference))))
    if error > 1e-9:
        return "fail", "numpy matmul differs from the exact sum by %.2e" % error
    return "pass", "numpy float64 48x48 against exact sums (torch not installed), error %.1e" % error


def check_matmul():
    if not have("torch"):
        cpu = timed("matmul[cpu]", numpy_matmul) if have("numpy") else result("matmul[cpu]", "skip", "neither torch nor numpy installed")
        return [cpu, result("matmul[gpu]", "skip", gpu_skip_reason())]
    return per_device(
        "matmul",
        lambda: torch_matmul("cpu", "float32", 1e-4),
        lambda: torch_matmul("cuda", "float32", 5e-3),  # TF32 may be on
    )


# -- scaled dot-product attention ----------------------------------------------------------


def sdpa(device, dtype_name, tol):
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 64, generator=gen) for _ in range(3))  # (B, H, T, D)
    scores = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    mask = torch.ones(128, 128, dtype=torch.bool).tril()
    reference = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v.double()  # (B, H, T, D)
    dtype = getattr(torch, dtype_name)
    got = F.scaled_dot_product_attention(q.to(device, dtype), k.to(device, dtype), v.to(device, dtype), is_causal=True)
    error = (got.double().cpu() - reference).abs().max().item()
    if error > tol:
        return "fail", "max error %.2e > %.0e against explicit softmax attention" % (error, tol)
    return "pass", "causal SDPA %s on %s, max error %.1e" % (dtype_name, device, error)


def check_sdpa():
    return per_device("sdpa", lambda: sdpa("cpu", "float32", 1e-4), lambda: sdpa("cuda", "float16", 1e-2))


# -- torch.compile ---------------------------------------------------------------------------


def compiled(device):
    import torch

    if device == "cpu":
        cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
        if not cxx:
            return "fail", "no C++ compiler on PATH (inductor needs one on CPU: install g++)"

    def fn(x, y):
        return torch.sin(x) * y + torch.cos(y).relu()

    x = torch.randn(1024, device=device)
    y = torch.randn(1024, device=device)
    got = torch.compile(fn, backend="inductor")(x, y)
    error = (got - fn(x, y)).abs().max().item()
    if error > 1e-4:
        return "fail", "compiled result differs from eager by %.2e" % error
    return "pass", "inductor on %s, matches eager (%.1e)" % (device, error)


def check_compile():
    return per_device("compile", lambda: compiled("cpu"), lambda: compiled("cuda"))


# -- C++ extension built on the fly -------------------------------------------------------------


CPP = "torch::Tensor add_scaled(torch::Tensor a, torch::Tensor b, double s) { return a + b * s; }"
CUDA = r"""
__global__ void axpy(const float* b, float* a, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += s * b[i];
}
torch::Tensor add_scaled(torch::Tensor a, torch::Tensor b, double s) {
  auto out = a.clone();
  int n = out.numel();
  axpy<<<(n + 255) / 256, 256>>>(b.data_ptr<float>(), out.data_ptr<float>(), (float)s, n);
  return out;
}
"""


def extension(device, workdir):
    import torch
    from torch.utils.cpp_extension import load_inline

    build = os.path.join(workdir, "ext_" + device)
    os.makedirs(build, exist_ok=True)
    if device == "cpu":
        module = load_inline("trainstack_smoke_cpu", cpp_sources=CPP, functions=["add_scaled"], build_directory=build)
    else:
        module = load_inline(
            "trainstack_smoke_cuda",
            cpp_sources="torch::Tensor add_scaled(torch::Tensor a, torch::Tensor b, double s);",
            cuda_sources=CUDA,
            functions=["add_scaled"],
            build_directory=build,
        )
    a = torch.arange(8.0, device=device)
    b = torch.ones(8, device=device)
    got = module.add_scaled(a, b, 2.0)
    if not torch.equal(got.cpu(), (a + 2 * b).cpu()):
        return "fail", "the extension returned a wrong result"
    return "pass", "load_inline built and ran a %s extension" % ("C++" if device == "cpu" else "CUDA")


def check_cpp_extension(workdir):
    return per_device("cpp_extension", lambda: extension("cpu", workdir), lambda: extension("cuda", workdir))


# -- torch.distributed all-reduce ------------------------------------------------------------


def _worker(rank, world, init_file, backend, out_dir):
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=world)
    device = "cuda:%d" % rank if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    tensor = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    with open(os.path.join(out_dir, "rank%d" % rank), "w") as fh:
        fh.write(str(tensor.cpu().tolist()))
    dist.destroy_process_group()


def all_reduce(backend, workdir):
    import torch.multiprocessing as mp

    world = 2
    run_dir = os.path.join(workdir, "dist_" + backend)
    os.makedirs(run_dir, exist_ok=True)
    init_file = os.path.join(run_dir, "init")
    if os.path.exists(init_file):
        os.remove(init_file)
    mp.start_processes(_worker, args=(world, init_file, backend, run_dir), nprocs=world, join=True, start_method="spawn")
    expected = str([float(sum(range(1, world + 1)))] * 4)
    for rank in range(world):
        with open(os.path.join(run_dir, "rank%d" % rank)) as fh:
            got = fh.read()
        if got != expected:
            return "fail", "rank %d got %s, expected %s" % (rank, got, expected)
    return "pass", "%s all-reduce over %d processes" % (backend, world)


def check_distributed(workdir):
    results = []
    if not have("torch"):
        return [result("distributed[cpu]", "skip", "torch not installed"), result("distributed[gpu]", "skip", gpu_skip_reason())]
    import torch

    results.append(timed("distributed[cpu]", lambda: all_reduce("gloo", workdir)))
    if not torch.cuda.is_available():
        results.append(result("distributed[gpu]", "skip", "no GPU"))
    elif torch.cuda.device_count() < 2:
        results.append(result("distributed[gpu]", "skip", "NCCL all-reduce needs 2 GPUs, found 1"))
    else:
        results.append(timed("distributed[gpu]", lambda: all_reduce("nccl", workdir)))
    return results


def main(argv):
    check, workdir, components = argv[0], argv[1], argv[2:]
    checks = {
        "imports": lambda: check_imports(components),
        "matmul": check_matmul,
        "sdpa": check_sdpa,
        "compile": check_compile,
        "cpp_extension": lambda: check_cpp_extension(workdir),
        "distributed": lambda: check_distributed(workdir),
    }
    if check not in checks:
        print(json.dumps([result(check, "fail", "unknown smoke check (known: %s)" % ", ".join(checks))]))
        return
    print(json.dumps(checks[check]()))


if __name__ == "__main__":
    main(sys.argv[1:])

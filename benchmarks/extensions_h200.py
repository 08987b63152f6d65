"""Prebuilt extension ops on a GPU, against torch: DeepSpeed's ds_report rows, FusedAdam against
torch.optim.AdamW (same parameters and gradients, 10 steps), and where installed apex's
FusedLayerNorm and fused dense and flash-attn's flash_attn_func (forward and backward) against
torch. Prints one JSON document and writes it to the path given.

    python3 benchmarks/extensions_h200.py OUT.json
    python3 benchmarks/extensions_h200.py OUT.json --only apex --apex-wheel DIR
        apex alone: pip-installs the apex wheel in DIR (built by extension_build.py apex
        --source) into a folder of its own, then its compiled modules with the GPU code each
        holds, and FusedLayerNorm (fp32, bf16) and FusedDense (bf16) forward and backward
        against torch.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def ds_report() -> dict:
    result = subprocess.run([sys.executable, "-m", "deepspeed.env_report"], capture_output=True, text=True, timeout=600)
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)
    rows = {m.group(1): [m.group(2), m.group(3)] for m in re.finditer(r"^(\S+) \.+ \[(\w+)\] \.+ \[(\w+)\]", text, re.M)}
    return {"returncode": result.returncode, "rows": rows, "tail": result.stderr[-800:]}


def compiled_archs() -> dict:
    """The GPU code in each prebuilt DeepSpeed op, read from its ELF .nv_fatbin (trainstack.verify.fatbin)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import deepspeed
    from trainstack.verify.fatbin import fatbin_archs

    root = Path(deepspeed.__file__).parent / "ops"
    return {p.name: (fatbin_archs(p).labels if fatbin_archs(p) else []) for p in sorted(root.rglob("*.so"))}


def fused_adam_vs_adamw(torch) -> dict:
    from deepspeed.ops.adam import FusedAdam

    torch.manual_seed(0)
    shapes = [(4096, 4096), (4096,), (1000, 37)]
    base = [torch.randn(s, device="cuda", dtype=torch.float32) for s in shapes]
    ours = [torch.nn.Parameter(p.clone()) for p in base]
    ref = [torch.nn.Parameter(p.clone()) for p in base]
    settings = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    fused = FusedAdam(ours, adam_w_mode=True, **settings)
    adamw = torch.optim.AdamW(ref, foreach=False, **settings)
    for step in range(10):
        grads = [torch.randn_like(p) for p in base]
        for p, q, g in zip(ours, ref, grads):
            p.grad, q.grad = g.clone(), g.clone()
        fused.step()
        adamw.step()
    torch.cuda.synchronize()
    diff = max((p - q).abs().max().item() for p, q in zip(ours, ref))
    moved = max((q - b).abs().max().item() for q, b in zip(ref, base))
    return {"steps": 10, "max_abs_diff": diff, "max_abs_update": moved, "params": sum(p.numel() for p in ours)}


def apex_checks(torch) -> dict:
    """apex's compiled modules present (ops.toml's list), the GPU code in each (.nv_fatbin), and
    FusedLayerNorm (fp32, bf16) and FusedDense (bf16) forward and backward against torch."""
    try:
        import apex
        from apex.normalization import FusedLayerNorm
    except Exception as exc:  # noqa: BLE001 - the reason is the finding
        return {"skipped": f"apex not importable: {type(exc).__name__}: {exc}"[:300]}
    out = {"file": apex.__file__, "modules": apex_modules()}
    for dtype in (torch.float32, torch.bfloat16):
        try:
            out[f"fused_layer_norm_{str(dtype).split('.')[-1]}"] = layer_norm_vs_torch(torch, FusedLayerNorm, dtype)
        except Exception as exc:  # noqa: BLE001
            out[f"fused_layer_norm_{str(dtype).split('.')[-1]}"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        out["fused_dense_bfloat16"] = fused_dense_vs_torch(torch)
    except Exception as exc:  # noqa: BLE001
        out["fused_dense_bfloat16"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def apex_modules() -> dict:
    """Each compiled module of apex in trainstack's op table: imported or why not, and its GPU code."""
    import importlib
    import importlib.util
    import tomllib

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from trainstack.verify.fatbin import fatbin_archs

    data = tomllib.loads((Path(__file__).resolve().parent.parent / "src" / "trainstack" / "verify" / "data" / "ops.toml").read_text())
    names = next(e["modules"] for e in data["extension"] if e["name"] == "apex")
    found = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            found[name] = {"present": False}
            continue
        try:
            importlib.import_module(name)
            error = None
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {exc}"[:200]
        archs = fatbin_archs(Path(spec.origin))
        found[name] = {"present": True, "imported": error is None, "error": error, "file": Path(spec.origin).name,
                       "archs": archs.labels if archs else []}
    return found


def _diff(a, b) -> float:
    return (a.float() - b.float()).abs().max().item()


def layer_norm_vs_torch(torch, FusedLayerNorm, dtype) -> dict:
    """Same input, weight, bias and output gradient through apex and torch.nn.functional.layer_norm;
    the bf16 case also against an fp32 torch reference (what each side's rounding costs)."""
    torch.manual_seed(0)
    shape, hidden = (16, 512), 4096
    x = torch.randn(*shape, hidden, device="cuda", dtype=dtype)
    fused = FusedLayerNorm(hidden).to(device="cuda", dtype=dtype)
    with torch.no_grad():
        fused.weight.copy_(1 + 0.1 * torch.randn(hidden, device="cuda", dtype=dtype))
        fused.bias.copy_(0.1 * torch.randn(hidden, device="cuda", dtype=dtype))
    grad = torch.randn(*shape, hidden, device="cuda", dtype=dtype)

    def run(fn, cast):
        xi = x.detach().to(cast).requires_grad_()
        w, b = fused.weight.detach().to(cast).requires_grad_(), fused.bias.detach().to(cast).requires_grad_()
        y = fn(xi, w, b)
        y.backward(grad.to(cast))
        torch.cuda.synchronize()
        return y.detach(), xi.grad, w.grad, b.grad

    def apex_run():
        xi = x.detach().clone().requires_grad_()
        y = fused(xi)
        y.backward(grad)
        torch.cuda.synchronize()
        return y.detach(), xi.grad, fused.weight.grad, fused.bias.grad

    ours = apex_run()
    ref = run(lambda xi, w, b: torch.nn.functional.layer_norm(xi, (hidden,), w, b, fused.eps), dtype)
    names = ("y", "dx", "dweight", "dbias")
    result = {"shape": [*shape, hidden], "dtype": str(dtype).split(".")[-1],
              "max_abs_diff_vs_torch": {n: _diff(a, b) for n, a, b in zip(names, ours, ref)},
              "max_abs_torch": {n: b.float().abs().max().item() for n, b in zip(names, ref)}}
    if dtype != torch.float32:
        exact = run(lambda xi, w, b: torch.nn.functional.layer_norm(xi, (hidden,), w, b, fused.eps), torch.float32)
        result["max_abs_diff_vs_fp32_torch"] = {"apex": {n: _diff(a, e) for n, a, e in zip(names, ours, exact)},
                                                "torch": {n: _diff(b, e) for n, b, e in zip(names, ref, exact)}}
    return result


def fused_dense_vs_torch(torch) -> dict:
    """apex.fused_dense.FusedDense (fused_dense_cuda: GEMM + bias, and its backward) against F.linear."""
    from apex.fused_dense import FusedDense

    torch.manual_seed(0)
    dtype = torch.bfloat16
    dense = FusedDense(1024, 4096).to(device="cuda", dtype=dtype)
    with torch.no_grad():  # FusedDense leaves its parameters uninitialised (torch.empty)
        dense.weight.copy_(torch.randn(4096, 1024, device="cuda", dtype=dtype) / 32)
        dense.bias.copy_(0.1 * torch.randn(4096, device="cuda", dtype=dtype))
    x = torch.randn(512, 1024, device="cuda", dtype=dtype)
    grad = torch.randn(512, 4096, device="cuda", dtype=dtype)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    w, b = dense.weight.detach().clone().requires_grad_(), dense.bias.detach().clone().requires_grad_()
    ya = dense(xa)
    ya.backward(grad)
    yb = torch.nn.functional.linear(xb, w, b)
    yb.backward(grad)
    torch.cuda.synchronize()
    names = ("y", "dx", "dweight", "dbias")
    ours, ref = (ya, xa.grad, dense.weight.grad, dense.bias.grad), (yb, xb.grad, w.grad, b.grad)
    return {"shape": [512, 1024, 4096], "dtype": "bfloat16",
            "max_abs_diff_vs_torch": {n: _diff(a, c) for n, a, c in zip(names, ours, ref)},
            "max_abs_torch": {n: c.float().abs().max().item() for n, c in zip(names, ref)}}


def flash_checks(torch) -> dict:
    try:
        from flash_attn import flash_attn_func
    except Exception as exc:  # noqa: BLE001
        return {"skipped": f"flash-attn not importable: {type(exc).__name__}: {exc}"[:300]}
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 2048, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = flash_attn_func(q, k, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    grad = torch.randn_like(out)
    g1 = torch.autograd.grad(out, (q, k, v), grad)
    g2 = torch.autograd.grad(ref, (q, k, v), grad)
    return {"fwd_max_abs_diff": (out - ref).abs().max().item(),
            "bwd_max_abs_diff": max((a - b).abs().max().item() for a, b in zip(g1, g2))}


def install_wheel(wheel: Path, site: Path) -> dict:
    """pip install the built wheel (no dependencies, no index) into ``site`` and put it first on sys.path."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile",
                             "--upgrade", "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    sys.path.insert(0, str(site))
    return {"wheel": wheel.name, "wheel_bytes": wheel.stat().st_size, "returncode": result.returncode,
            "seconds": round(time.perf_counter() - start, 1), "tail": (result.stdout + result.stderr)[-400:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="write the JSON here too")
    parser.add_argument("--only", choices=["all", "apex"], default="all", help="apex: apex's checks alone")
    parser.add_argument("--apex-wheel", type=Path, help="install this apex wheel into --site first (a folder: its one .whl)")
    parser.add_argument("--site", type=Path, default=Path(tempfile.gettempdir()) / "ts-apex-site")
    args = parser.parse_args()
    result = {}
    if args.apex_wheel is not None:
        wheels = sorted(args.apex_wheel.glob("apex-*.whl")) if args.apex_wheel.is_dir() else [args.apex_wheel]
        result["apex_install"] = install_wheel(wheels[0], args.site) if wheels else {"error": f"no apex wheel in {args.apex_wheel}"}
    import torch

    start = time.perf_counter()
    result.update({"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
                   "capability": "%d%d" % torch.cuda.get_device_capability(0)})
    if args.only == "all":
        result["ds_report"] = ds_report()
        try:
            result["compiled_archs"] = compiled_archs()
        except Exception as exc:  # noqa: BLE001
            result["compiled_archs"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        try:
            result["fused_adam_vs_adamw"] = fused_adam_vs_adamw(torch)
        except Exception as exc:  # noqa: BLE001
            result["fused_adam_vs_adamw"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    result["apex"] = apex_checks(torch)
    if args.only == "all":
        result["flash_attn"] = flash_checks(torch)
    result["seconds"] = round(time.perf_counter() - start, 1)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""Prebuilt extension ops on a GPU, against torch: DeepSpeed's ds_report rows, FusedAdam against
torch.optim.AdamW (same parameters and gradients, 10 steps), and where installed apex's
FusedLayerNorm and fused dense and flash-attn's flash_attn_func (forward and backward) against
torch. Prints one JSON document and writes it to the path given.

    python3 benchmarks/extensions_h200.py OUT.json
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
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
    try:
        from apex.normalization import FusedLayerNorm
    except Exception as exc:  # noqa: BLE001 - the reason is the finding
        return {"skipped": f"apex not importable: {type(exc).__name__}: {exc}"[:300]}
    out = {}
    torch.manual_seed(0)
    x = torch.randn(64, 1024, 4096, device="cuda", requires_grad=True)
    fused, ref = FusedLayerNorm(4096).cuda(), torch.nn.LayerNorm(4096).cuda()
    y1, y2 = fused(x), ref(x)
    out["fused_layer_norm_fwd_max_abs_diff"] = (y1 - y2).abs().max().item()
    try:
        from apex.fused_dense import FusedDense

        dense = FusedDense(1024, 4096).cuda().half()
        inp = torch.randn(512, 1024, device="cuda", dtype=torch.half)
        expected = torch.nn.functional.linear(inp, dense.weight, dense.bias)
        out["fused_dense_max_abs_diff"] = (dense(inp) - expected).abs().max().item()
    except Exception as exc:  # noqa: BLE001
        out["fused_dense"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


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


def main() -> None:
    import torch

    start = time.perf_counter()
    result = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
              "capability": "%d%d" % torch.cuda.get_device_capability(0), "ds_report": ds_report()}
    try:
        result["compiled_archs"] = compiled_archs()
    except Exception as exc:  # noqa: BLE001
        result["compiled_archs"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        result["fused_adam_vs_adamw"] = fused_adam_vs_adamw(torch)
    except Exception as exc:  # noqa: BLE001
        result["fused_adam_vs_adamw"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    result["apex"] = apex_checks(torch)
    result["flash_attn"] = flash_checks(torch)
    result["seconds"] = round(time.perf_counter() - start, 1)
    text = json.dumps(result, indent=1)
    print(text)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""flash-attn's flash_attn_func checked against torch's scaled_dot_product_attention on the GPU:
numerics (max abs error of the output and of dq, dk, dv against an fp32 reference) and speed
(forward, forward+backward) side by side, in bf16, causal and not, head dims 64 and 128, sequence
1k to 8k at a constant 16k tokens a batch and a model width of 2048 (heads = 2048 / head dim).

    python3 benchmarks/flash_attn_check.py [--out FILE] [--repeats N] [--no-bench]

The reference is SDPA's math backend in fp32 on the same bf16 inputs. flash-attn passes a shape
when its errors are at most twice those of SDPA in bf16 plus 1e-3 (flash-attn's own test rule).
SDPA is timed with torch's default choice and with each fused backend it allows (flash, cuDNN,
memory-efficient). Then, unless --no-bench, `trainstack bench` trains the 1b preset (batch 4,
sequence 4096) in compile+bf16 and compile+bf16+flash side by side, one run, and the two rows
(tokens/s, MFU, step ms, peak memory, the attention each used) join the result. Exit 0 when every shape passes, 1 when one does not, 6 with no GPU or no
flash_attn.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

TOKENS = 16384
WIDTH = 2048
HEAD_DIMS = (64, 128)
SEQS = (1024, 2048, 4096, 8192)


def fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def attention_flops(batch: int, heads: int, seq: int, dim: int, causal: bool, backward: bool) -> float:
    """flash-attn's own count: 4·b·h·s²·d for the forward (halved when causal), 2.5× that with the backward."""
    forward = 4.0 * batch * heads * seq * seq * dim / (2 if causal else 1)
    return forward * (3.5 if backward else 1.0)


def timed_ms(fn, repeats: int) -> float:
    """Median of `repeats` CUDA-event timings after 3 warm-up calls."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def sdpa_backends():
    """(label, context manager factory or None) for SDPA's default and each fused backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return [
        ("sdpa", None),
        ("sdpa-flash", lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
        ("sdpa-cudnn", lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)),
        ("sdpa-efficient", lambda: sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)),
    ]


def check_shape(seq: int, dim: int, causal: bool, repeats: int) -> dict:
    import contextlib

    import torch
    import torch.nn.functional as F
    from flash_attn import flash_attn_func
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, heads = TOKENS // seq, WIDTH // dim
    torch.manual_seed(0)
    # flash-attn's layout: (batch, seq, heads, dim); SDPA's: (batch, heads, seq, dim)
    q, k, v = (torch.randn(batch, seq, heads, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    grad = torch.randn_like(q)

    def grads_of(fn, inputs, grad_out):
        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
        out = fn(*leaves)
        out.backward(grad_out.to(out.dtype))
        return out.detach(), [t.grad.detach() for t in leaves]

    def reference():
        """fp32 math SDPA, a few heads at a time so no score matrix passes ~1 GiB: (out, [dq, dk, dv])."""
        step = max(1, (1 << 28) // (batch * seq * seq))
        parts = [grads_of(sdpa, [t[:, :, h : h + step].float() for t in (q, k, v)], grad[:, :, h : h + step]) for h in range(0, heads, step)]
        return torch.cat([p[0] for p in parts], 2), [torch.cat([p[1][i] for p in parts], 2) for i in range(3)]

    def flash(q_, k_, v_):
        return flash_attn_func(q_, k_, v_, causal=causal)

    def sdpa(q_, k_, v_):
        out = F.scaled_dot_product_attention(q_.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2), is_causal=causal)
        return out.transpose(1, 2)

    with sdpa_kernel(SDPBackend.MATH):
        ref_out, ref_grads = reference()
    row: dict = {"seq": seq, "head_dim": dim, "causal": causal, "batch": batch, "heads": heads}
    errors = {}
    for label, fn in (("flash_attn", flash), ("sdpa", sdpa)):
        out, grads = grads_of(fn, (q, k, v), grad)
        names = ("out", "dq", "dk", "dv")
        errors[label] = {n: float((a.float() - b).abs().max()) for n, a, b in zip(names, [out, *grads], [ref_out, *ref_grads])}
    del ref_out, ref_grads
    row["max_abs_error"] = errors
    row["passes"] = all(errors["flash_attn"][n] <= 2 * errors["sdpa"][n] + 1e-3 for n in errors["sdpa"])

    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    speed = {}
    for label, fn, ctx in [("flash_attn", flash, None), *[(name, sdpa, c) for name, c in sdpa_backends()]]:
        try:
            with ctx() if ctx else contextlib.nullcontext():
                fwd = timed_ms(lambda: fn(q, k, v), repeats)
                both = timed_ms(lambda: fn(*leaves).backward(grad), repeats)
        except RuntimeError as exc:  # a backend that does not take this shape on this GPU
            speed[label] = {"unavailable": str(exc).splitlines()[0][:200]}
            continue
        speed[label] = {
            "fwd_ms": round(fwd, 3),
            "fwd_bwd_ms": round(both, 3),
            "fwd_tflops": round(attention_flops(batch, heads, seq, dim, causal, False) / fwd / 1e9, 1),
            "fwd_bwd_tflops": round(attention_flops(batch, heads, seq, dim, causal, True) / both / 1e9, 1),
        }
    row["speed"] = speed
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'causal':>6} {'d':>4} {'seq':>5} | {'flash err out/dq':>17} {'sdpa err out/dq':>17} | "
          f"{'fa fwd+bwd ms':>13} {'sdpa ms':>8} {'best sdpa':>15} {'ratio':>6}")  # fmt: skip
    for r in rows:
        fa, sd = r["max_abs_error"]["flash_attn"], r["max_abs_error"]["sdpa"]
        timed = {k: v["fwd_bwd_ms"] for k, v in r["speed"].items() if "fwd_bwd_ms" in v}
        best = min((k for k in timed if k != "flash_attn"), key=timed.get, default=None)
        fa_ms = timed.get("flash_attn")
        ratio = f"{timed[best] / fa_ms:.2f}x" if best and fa_ms else "-"
        print(f"{str(r['causal']):>6} {r['head_dim']:>4} {r['seq']:>5} | {fa['out']:.1e}/{fa['dq']:.1e}  {sd['out']:.1e}/{sd['dq']:.1e}  | "
              f"{fa_ms if fa_ms else '-':>13} {timed.get('sdpa', '-'):>8} {best or '-':>15} {ratio:>6}")  # fmt: skip


BENCH = ["--preset", "1b", "--batch", "4", "--seq", "4096", "--modes", "compile+bf16,compile+bf16+flash", "--ablation", "--steps", "10", "--warmup", "3"]
BENCH_FIELDS = ("mode", "status", "error", "tokens_per_s_per_gpu", "mfu", "step_ms_median", "step_ms_p10", "step_ms_p90", "mem_allocated_gib", "sdpa_backend", "loss_first", "loss_final")


def bench_rows() -> dict:
    """compile+bf16 against compile+bf16+flash on the 1b preset, in one bench run."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        command = [sys.executable, "-m", "trainstack", "bench", *BENCH, "--out", str(out / "run"), "--output", str(out / "bench.json")]
        done = subprocess.run(command, capture_output=True, text=True, timeout=420)
        if done.returncode != 0 or not (out / "bench.json").is_file():
            return {"command": "trainstack bench " + " ".join(BENCH), "exit": done.returncode, "stderr": done.stderr[-2000:]}
        document = json.loads((out / "bench.json").read_text())
    rows = document.get("rows", document) if isinstance(document, dict) else document
    kept = [{k: r.get(k) for k in BENCH_FIELDS} for r in rows]
    by_mode = {r["mode"]: r for r in kept}
    base, flash = by_mode.get("compile+bf16", {}), by_mode.get("compile+bf16+flash", {})
    ratio = None
    if base.get("tokens_per_s_per_gpu") and flash.get("tokens_per_s_per_gpu"):
        ratio = round(flash["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"], 3)
    return {"command": "trainstack bench " + " ".join(BENCH), "exit": 0, "rows": kept, "flash_over_sdpa_tokens_per_s": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "flash_attn_build" / "flash_attn_check.json")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-bench", action="store_true", help="leave out the bench rows of the 1b preset")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        fail("torch is not installed; accepted: an environment with a CUDA torch", 6)
    if not torch.cuda.is_available():
        fail("skip: no GPU (torch.cuda.is_available() is False)", 6)
    try:
        import flash_attn
    except ImportError as exc:
        fail(f"flash_attn does not import ({exc}); install the wheel trainstack built first", 6)
    from trainstack.fsutil import atomic_write_json

    rows = [check_shape(s, d, c, args.repeats) for c in (False, True) for d in HEAD_DIMS for s in SEQS]
    print_table(rows)
    result = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "flash_attn": flash_attn.__version__,
        "python": platform.python_version(),
        "tokens_per_batch": TOKENS,
        "width": WIDTH,
        "dtype": "bfloat16",
        "reference": "SDPA math backend in fp32 on the same bf16 inputs",
        "pass_rule": "flash-attn error <= 2 x SDPA bf16 error + 1e-3, for out, dq, dk, dv",
        "rows": rows,
        "all_pass": all(r["passes"] for r in rows),
    }
    atomic_write_json(args.out, result)
    if not args.no_bench:
        result["bench"] = bench_rows()
        print(json.dumps(result["bench"], indent=1))
        atomic_write_json(args.out, result)
    print(f"{sum(r['passes'] for r in rows)}/{len(rows)} shapes pass; written {args.out}")
    raise SystemExit(0 if result["all_pass"] else 1)


if __name__ == "__main__":
    main()

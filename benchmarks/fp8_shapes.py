"""Float8 against bf16, one compiled block and one linear layer at a time, on a GPU.

For each preset asked, at the bench's tokens per step (batch x seq), time the forward and
backward of (1) one compiled decoder block with bf16 parameters, as bench's compile+bf16
mode runs it, and the same block with its linear layers converted as bench converts them
(`bench.fp8.swap_linears`: torchao's Float8Linear, fed a matrix) under each
float8 variant; (2) each distinct linear shape of the block alone, compiled. Prints one
table per preset with float8's speed-up over bf16 (bf16 time / float8 time) and writes
the figures as JSON.

Variants (torchao Float8LinearConfig):
  tensorwise        the recipe as torchao ships it (fast accumulation in the forward product)
  tensorwise-fast   fast accumulation in the two backward products too
  rowwise           one scale per row
  tw-ffn / tw-fast-ffn   only the feed-forward layers converted (attention's in bf16)

    python3 benchmarks/fp8_shapes.py --presets 1b:4:4096,3b:2:4096 --out OUT.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from trainstack.bench.fp8 import swap_linears  # noqa: E402
from trainstack.nn.decoder import Block, rope_tables  # noqa: E402
from trainstack.nn.presets import preset  # noqa: E402



# variant -> (bench.fp8 recipe, whether only the feed-forward layers convert)
VARIANT_RECIPES = {
    "tensorwise": ("tensorwise", False),
    "tensorwise-fast": ("tensorwise-fastacc", False),
    "rowwise": ("rowwise", False),
    "tw-ffn": ("tensorwise", True),
    "tw-fast-ffn": ("tensorwise-fastacc", True),
}


def converted(module: nn.Module, variant: str) -> nn.Module:
    """A copy of ``module`` with its linear layers in float8, all of them (no size rule:
    this measures where the rules draw their lines) or the feed-forward ones."""
    recipe, ffn_only = VARIANT_RECIPES[variant]
    m = copy.deepcopy(module)
    swap_linears(m, recipe, lambda name: not ffn_only or "feed_forward" in name)
    return m


def time_fwd_bwd(fn, make_inputs, *, warmup: int = 3, iters: int = 15) -> float:
    """Median milliseconds of forward and backward (CUDA events around each)."""
    inputs = make_inputs()
    for _ in range(warmup):
        fn(*inputs).float().sum().backward()
    samples = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn(*inputs)
        out.backward(torch.ones_like(out))
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def block_rows(name: str, batch: int, seq: int) -> list[dict]:
    cfg = preset(name)
    torch.manual_seed(0)
    with torch.device("cuda"):
        block = Block(cfg).to(torch.bfloat16).train()
        cos, sin = rope_tables(cfg)
    cos, sin = cos[:seq], sin[:seq]

    def inputs():
        return (torch.randn(batch, seq, cfg.dim, device="cuda", dtype=torch.bfloat16, requires_grad=True), cos, sin)

    rows = []
    base = None
    for variant in ("bf16", *VARIANT_RECIPES):
        t0 = time.perf_counter()
        m = block if variant == "bf16" else converted(block, variant)
        compiled = torch.compile(m)
        ms = time_fwd_bwd(compiled, inputs)
        base = ms if variant == "bf16" else base
        rows.append({"preset": name, "what": "block", "variant": variant, "ms": ms, "speedup": base / ms, "seconds_with_compile": time.perf_counter() - t0})
        print(f"{name} block {variant:16s} {ms:8.3f} ms  x{base / ms:.3f}", flush=True)
        del compiled, m
        torch._dynamo.reset()
    return rows


def linear_rows(name: str, batch: int, seq: int) -> list[dict]:
    cfg = preset(name)
    shapes = {
        "wqkv": (cfg.dim, cfg.dim + 2 * cfg.kv_dim),
        "wo": (cfg.dim, cfg.dim),
        "w13": (cfg.dim, 2 * cfg.ffn_dim),
        "w2": (cfg.ffn_dim, cfg.dim),
    }
    rows = []
    for layer, (k, n) in shapes.items():
        with torch.device("cuda"):
            lin = nn.Sequential(nn.Linear(k, n, bias=False)).to(torch.bfloat16)

        def inputs(k=k):
            return (torch.randn(batch * seq, k, device="cuda", dtype=torch.bfloat16, requires_grad=True),)

        base = None
        for variant in ("bf16", "tensorwise", "tensorwise-fast", "rowwise"):
            m = lin if variant == "bf16" else converted(lin, variant)
            ms = time_fwd_bwd(torch.compile(m), inputs)
            base = ms if variant == "bf16" else base
            tflops = 6 * batch * seq * k * n / ms / 1e9
            rows.append({"preset": name, "what": layer, "k": k, "n": n, "variant": variant, "ms": ms, "speedup": base / ms, "tflops": tflops})
            print(f"{name} {layer:5s} {k}x{n} {variant:16s} {ms:8.3f} ms  x{base / ms:.3f}  {tflops:6.0f} TFLOP/s", flush=True)
            torch._dynamo.reset()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="1b:4:4096,3b:2:4096", help="preset:batch:seq, comma-separated")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--skip-linears", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skip: no GPU")
        return 3
    rows: list[dict] = []
    for spec in args.presets.split(","):
        name, batch, seq = spec.split(":")
        rows += block_rows(name, int(batch), int(seq))
        if not args.skip_linears:
            rows += linear_rows(name, int(batch), int(seq))
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "command": " ".join(sys.argv), "rows": rows}
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

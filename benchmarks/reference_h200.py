"""The reference configuration's targets, checked on what benchmarks/bench_h200_reference.sh wrote.

usage: python benchmarks/reference_h200.py OUT_DIR

Each target is checked on what was measured in OUT_DIR (a target whose run is absent is
MISSED), one line each, "met" or "MISSED":
- Llama 3.1 8B at sequence 8192 (bench-llama3.1-8b-b*-s8192.jsonl): the best bf16 mode
  reaches 63% MFU (NeMo's 60.0% + 5%), the best float8 mode 780 model TFLOP/s per GPU
  (Megatron-Bridge's 744 + 5%), each row's loss finite and falling;
- 1b and 3b at sequence 4096: compile+bf16 reaches 62% MFU, and the best mode is at least
  1.1x the plain compile mode (autocast over fp32 weights) of the same run;
- every measured row carries its time breakdown;
- the float8 parity runs (parity-125m-*.json, parity-1b-*.json) end under 0.25% relative gap;
  beside each, the gap of the first mode against itself (self/parity-*.json), where measured.
Then names the three largest costs of the fastest 8B row's step, from its breakdown, with
what would remove each. Exit 0 when every target is met, else 1.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from verdicts import fp8_part, missed, rows_of, verdict

MFU_8B_BF16 = 0.63
TFLOPS_8B_FP8 = 780.0
MFU_SMALL_BF16 = 0.62
OVER_COMPILE = 1.1
PARITY = 0.0025

# what would remove each class's time (the levers), shown beside the three largest
REMEDIES = {
    "GEMM": "float8 for more of the products (the output projection too) and tiles the shape fills: larger batch where memplan says it fits",
    "attention forward": "the fastest attention kernel for the shape (cuDNN, FlexAttention or a flash-attn build), chosen per shape",
    "attention backward": "the fastest attention backward for the shape (cuDNN, FlexAttention or a flash-attn build)",
    "norm / elementwise": "fusing the norm, RoPE and SwiGLU glue (and float8 casts) into the products' prologues and epilogues",
    "optimizer": "a fused or foreach AdamW over the fp32 master weights, one kernel per group",
    "recompute": "recomputing less: a larger batch of kept blocks where memplan says it fits, float8 saved activations",
    "communication": "overlapping the collectives with compute",
    "other": "a look at the kernels by name in the profile (bench --profile)",
    "idle": "CUDA graphs for the step, no host synchronisation inside it",
}

def fp8(row: dict) -> bool:
    return bool(fp8_part(row["mode"]))


def falling(row: dict) -> bool:
    first, final = row.get("loss_first"), row.get("loss_final")
    return isinstance(first, float) and isinstance(final, float) and math.isfinite(final) and final < first


def check_8b(out: Path) -> dict | None:
    rows = [r for path in sorted(out.glob("bench-llama3.1-8b-b*-s8192.jsonl")) for r in rows_of(path)]
    if not rows:
        verdict("llama3.1-8b seq 8192: not measured", False)
        return None
    ok = [r for r in rows if r.get("status") == "ok"]
    for r in rows:
        if r.get("status") != "ok":
            print(f"llama3.1-8b batch {r.get('batch')} {r['mode']}: {r.get('status')} {r.get('error') or ''}".rstrip())
    bf16 = max((r for r in ok if not fp8(r)), key=lambda r: r.get("mfu") or 0.0, default=None)
    if bf16 is None:
        verdict("llama3.1-8b seq 8192 bf16: not measured", False)
    else:
        mfu = bf16.get("mfu") or 0.0
        causal = f"causal half {bf16['mfu_causal']:.1%}; " if isinstance(bf16.get("mfu_causal"), float) else ""
        verdict(f"llama3.1-8b seq 8192 bf16: {bf16['mode']} batch {bf16['batch']} MFU {mfu:.1%} ({causal}target {MFU_8B_BF16:.0%})",
                mfu >= MFU_8B_BF16)
    best8 = max((r for r in ok if fp8(r)), key=lambda r: r.get("achieved_tflops_per_gpu") or 0.0, default=None)
    if best8 is None:
        verdict("llama3.1-8b seq 8192 fp8: not measured", False)
    else:
        tflops = best8.get("achieved_tflops_per_gpu") or 0.0
        verdict(f"llama3.1-8b seq 8192 fp8: {best8['mode']} batch {best8['batch']} {tflops:.0f} model TFLOP/s per GPU "
                f"(target {TFLOPS_8B_FP8:.0f})", tflops >= TFLOPS_8B_FP8)
    for r in ok:
        verdict(f"llama3.1-8b batch {r['batch']} {r['mode']}: loss {_loss(r.get('loss_first'))} -> {_loss(r.get('loss_final'))} finite and falling",
                falling(r))
    return max(ok, key=lambda r: r.get("tokens_per_s_per_gpu") or 0.0, default=None)


def _loss(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def check_small(out: Path) -> None:
    for model in ("1b", "3b"):
        rows = [r for path in sorted(out.glob(f"bench-{model}-b*-s4096.jsonl")) for r in rows_of(path)]
        ok = {r["mode"]: r for r in rows if r.get("status") == "ok"}
        if not rows:
            verdict(f"{model} seq 4096: not measured", False)
            continue
        base = ok.get("compile+bf16")
        mfu = (base or {}).get("mfu") or 0.0
        verdict(f"{model} seq 4096: compile+bf16 MFU {mfu:.1%} (target {MFU_SMALL_BF16:.0%})", mfu >= MFU_SMALL_BF16)
        plain = ok.get("compile")
        best = max(ok.values(), key=lambda r: r.get("tokens_per_s_per_gpu") or 0.0, default=None)
        if plain is None or best is None:
            verdict(f"{model} seq 4096: best mode / compile not measured", False)
            continue
        ratio = best["tokens_per_s_per_gpu"] / plain["tokens_per_s_per_gpu"]
        verdict(f"{model} seq 4096: best mode {best['mode']} / compile tokens/s = {ratio:.3f} (target {OVER_COMPILE})", ratio >= OVER_COMPILE)


def check_breakdowns(out: Path) -> None:
    rows = [r for path in sorted(out.glob("bench-*.jsonl")) for r in rows_of(path) if r.get("status") == "ok"]
    missing = [f"{r['model']} {r['mode']}" for r in rows if not isinstance(r.get("breakdown"), dict)]
    verdict(f"time breakdown on every measured row ({len(rows) - len(missing)} of {len(rows)}"
            + (f"; without: {', '.join(missing[:5])}" if missing else "") + ")", bool(rows) and not missing)


def check_parity(out: Path) -> None:
    for model in ("125m", "1b"):
        found = sorted(out.glob(f"parity-{model}-b*-s*.json"))
        if not found:
            verdict(f"fp8 parity {model}: not measured", False)
        for path in found:
            result = json.loads(path.read_text())
            a, b = result["modes"]
            if result.get("status") != "ok":
                verdict(f"fp8 parity {model} {a} vs {b}: not measured ({result.get('error')})", False)
                continue
            gap = result["final_rel_gap"]
            verdict(f"fp8 parity {model} {a} vs {b}: relative loss gap after {result['steps']} steps {gap:.3%}{_over_seeds(result)} (target {PARITY:.2%})", gap < PARITY)
        for path in sorted((out / "self").glob(f"parity-{model}-b*-s*.json")):
            result = json.loads(path.read_text())
            if result.get("status") == "ok":
                a, b = result["modes"]
                print(f"  noise floor {model}: {a} against itself, relative loss gap after {result['steps']} steps "
                      f"{result['final_rel_gap']:.3%}{_over_seeds(result)} (largest over the last third {result['max_rel_gap']:.3%})")


def _over_seeds(result: dict) -> str:
    """', mean curves of N seeds (each: ...)' where the parity ran over several seeds."""
    each = result.get("seed_final_rel_gaps") or []
    return f", mean curves of {len(each)} seeds (each seed: {', '.join(f'{g:.3%}' for g in each)})" if len(each) > 1 else ""


def largest_costs(row: dict | None) -> None:
    """The three largest classes of the row's step (idle included), with what would remove each."""
    b = (row or {}).get("breakdown")
    if not isinstance(b, dict):
        print("largest costs on llama3.1-8b: no breakdown measured")
        return
    shares = {name: c for name, c in b["classes"].items()} | {"idle": {"share": b["idle_share"], "ms_per_step": b["idle_ms_per_step"]}}
    top = sorted(shares.items(), key=lambda kv: -kv[1]["share"])[:3]
    print(f"largest costs on llama3.1-8b ({row['mode']}, batch {row['batch']}, {b['wall_ms_per_step']:.0f} ms per step):")
    for name, c in top:
        rate = ""
        if c.get("tflops") is not None:
            rate = f", {c['tflops']:.0f} TFLOP/s" + (f" ({c['of_ceiling']:.0%} of its ceiling)" if c.get("of_ceiling") else "")
        elif c.get("gbps") is not None:
            rate = f", {c['gbps']:.0f} GB/s" + (f" ({c['of_ceiling']:.0%} of its ceiling)" if c.get("of_ceiling") else "")
        print(f"  {name}: {c['share']:.1%} of the step, {c['ms_per_step']:.1f} ms{rate}; to remove: {REMEDIES.get(name, '?')}")


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("benchmarks/results/bench_h200_reference")
    best = check_8b(out)
    check_small(out)
    check_breakdowns(out)
    check_parity(out)
    largest_costs(best)
    return 1 if missed() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

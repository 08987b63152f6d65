#!/usr/bin/env python3
"""Memplan's whole-step prediction on torchvision's image classifiers, against a GPU's allocator.

Each model (random weights, 1000 classes, cross-entropy against class 0, bf16 autocast, fused AdamW) is planned by
``memplan.calibrate_any`` on the GPU (its first planned block measured for real, as
``memplan.plan`` does there), then trained with every block kept, every block recomputed and
the first recomputed (the rest kept), three steps each; the prediction (``breakdown``'s
allocated peak) is set beside ``torch.cuda.max_memory_allocated`` over the last step.

Usage: python benchmarks/memplan_vision_gpu.py [--models resnet50:layer1,vit_b_16] [--batch 64] [--out DIR]
(``model:blocks`` names the list of blocks; without it memplan finds one.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from trainstack import memplan
from trainstack.fsutil import atomic_write_text
from trainstack.memplan.memory import breakdown
from trainstack.memplan.overheads import default_overheads
from trainstack.memplan.costs import Choice
from trainstack.memplan.wrappers import apply_choices

K, F = Choice.KEEP, Choice.FULL


def class_loss(logits, _batch):
    """Cross-entropy against class 0 (made where the logits are: fake tensors in calibration)."""
    return torch.nn.functional.cross_entropy(logits.float(), torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device))


def measured_peak(model, batch, steps: int = 3) -> int:
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    for step in range(steps):
        if step == steps - 1:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = class_loss(model(**batch), batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del opt
    return peak


def measure(name: str, blocks: str | None, batch_size: int) -> list[dict]:
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().cuda().train()
    size = 224
    batch = {"x": torch.randn(batch_size, 3, size, size, device="cuda")}
    profile = memplan.calibrate_any(model, batch, loss_fn=class_loss, blocks=blocks)
    torch.cuda.empty_cache()
    n = profile.n_blocks
    rows = []
    for label, choices in (("keep", (K,) * n), ("full", (F,) * n), ("first full", (F, *(K,) * (n - 1)))):
        predicted = breakdown(profile, choices, overheads=default_overheads())
        apply_choices(model, choices, profile.blocks, profile.first_block)
        real = measured_peak(model, batch)
        apply_choices(model, (K,) * n, profile.blocks, profile.first_block)
        torch.cuda.empty_cache()
        rows.append({"model": name, "blocks": f"{profile.blocks}[{profile.first_block}:{profile.first_block + n}]", "plan": label,
                     "predicted": predicted.allocated_peak, "measured": real, "error": predicted.allocated_peak / real - 1, "phase": predicted.transient_phase})
        print(f"{name:<16} {rows[-1]['blocks']:<24} {label:<10} predicted {predicted.allocated_peak / 2**20:9.1f} MiB  "
              f"measured {real / 2**20:9.1f} MiB  error {rows[-1]['error']:+.2%}  ({predicted.transient_phase})", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50:layer1,resnet50,convnext_tiny,vit_b_16")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/memplan_vision_gpu"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("error: no CUDA GPU: this benchmark measures a GPU's allocator", file=sys.stderr)
        return 6
    rows = []
    for spec in args.models.split(","):
        name, _, blocks = spec.partition(":")
        rows += measure(name, blocks or None, args.batch)
    worst = max(abs(r["error"]) for r in rows)
    summary = f"{len(rows)} runs on {torch.cuda.get_device_name()} (torch {torch.__version__}): prediction error at most {worst:.2%}"
    print(summary)
    command = "python3 " + " ".join(["benchmarks/memplan_vision_gpu.py", *sys.argv[1:]])
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "memplan_vision_gpu.json", json.dumps({"command": command, "rows": rows, "summary": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

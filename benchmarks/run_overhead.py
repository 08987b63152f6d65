#!/usr/bin/env python3
"""What the idle run hook costs a training loop: the same steps with the hook's optimizer
step hook installed (armed, nothing triggered) and without, alternated in one process.

The hook's only work per step while idle is StepProfiler.after_step (a step count and one
stat of the control file); this times a small model's steps both ways, in rounds of
alone/hooked/hooked/alone so drift cancels, and the hook call by itself.

Usage: python benchmarks/run_overhead.py [--out benchmarks/results/run_overhead] [--rounds 6] [--steps 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook

from trainstack.run.profiling import StepProfiler
from trainstack.run.settings import Settings, parse_signal

ROOT = Path(__file__).resolve().parents[1]


def steps_per_s(step, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        step()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "run_overhead")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(4)])
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(64, 256)

    def step() -> None:
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(profile_dir=Path(tmp) / "profile", control_dir=Path(tmp) / "control", profile_signal=parse_signal("USR1"))
        profiler = StepProfiler(settings, rank=0)
        for _ in range(10):
            step()
        alone, hooked = [], []
        for _ in range(args.rounds):
            for with_hook in (False, True, True, False):
                handle = register_optimizer_step_post_hook(profiler.after_step) if with_hook else None
                (hooked if with_hook else alone).append(steps_per_s(step, args.steps))
                if handle is not None:
                    handle.remove()
        calls = 20000
        start = time.perf_counter()
        for _ in range(calls):
            profiler.after_step(optimizer, (), {})
        hook_us = (time.perf_counter() - start) / calls * 1e6
    a, h = statistics.median(alone), statistics.median(hooked)
    result = {
        "steps_per_s_alone": a, "steps_per_s_hooked": h, "hooked_over_alone": h / a,
        "hook_call_us": hook_us, "step_ms": 1000 / a, "hook_share_of_step": hook_us / (1e6 / a),
        "rounds": args.rounds, "steps": args.steps, "device": "cpu", "torch": torch.__version__,
    }
    print(f"steps/s alone {a:.1f}  hooked (idle) {h:.1f}  hooked/alone {h / a:.4f}")
    print(f"idle hook per step: {hook_us:.2f} us = {result['hook_share_of_step']:.5f} of a {1000 / a:.2f} ms step")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "run_overhead.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

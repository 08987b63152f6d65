"""A user's training job as trainstack run finds it: a plain loop, no trainstack in sight.

python plain_loop.py --steps N [--batch B] [--step-seconds S] [--oom-at K]; under torchrun it trains
with DDP over gloo. Prints 'step i' as each step ends.
"""

import argparse
import os
import time

import torch
from torch import nn


def build():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.GELU()) for _ in range(4)], nn.Linear(64, 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--oom-at", type=int, default=-1, help="raise torch.OutOfMemoryError at this step")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    distributed = "RANK" in os.environ
    if distributed:
        torch.distributed.init_process_group("gloo")
    model = build()
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(args.batch, 64), torch.randn(args.batch, 1)
    for step in range(args.steps):
        if step == args.oom_at:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (planted)")
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(args.step_seconds)
    if distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()

"""One rank of the all-reduce check; started by torchrun, one process per GPU (or CPU rank with gloo).

Run as ``python -m torch.distributed.run --standalone --nproc-per-node N -m
trainstack.health.allreduce_worker --bytes B --out FILE``. Rank 0 writes the result
as JSON to FILE.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    if args.backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, device_id=device if device.type == "cuda" else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        result = _measure(device, rank, world, args)
        if rank == 0:
            args.out.write_text(json.dumps(result), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def _measure(device: torch.device, rank: int, world: int, args: argparse.Namespace) -> dict:
    numel = args.bytes // 4
    gen = torch.Generator(device=device).manual_seed(1234)  # the same base on every rank
    base = torch.rand(numel, generator=gen, device=device) + 0.5  # (numel,) float32, never zero
    x = base * (rank + 1)
    dist.all_reduce(x)
    # sum over ranks of (r + 1) * base = base * n(n+1)/2
    correct = torch.allclose(x, base * (world * (world + 1) / 2), rtol=1e-5)
    correct_all = torch.tensor([1.0 if correct else 0.0], device=device)
    dist.all_reduce(correct_all, op=dist.ReduceOp.MIN)
    del base
    times = _time(device, x, args.warmup, args.iters)
    # The slowest rank sets the pace of a collective.
    slowest = torch.tensor([statistics.median(times)], device=device, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    seconds = float(slowest.item())
    algbw = numel * 4 / seconds / 1e9
    return {
        "world_size": world,
        "backend": args.backend,
        "bytes": numel * 4,
        "median_s": seconds,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (world - 1) / world,
        "correct": bool(correct_all.item() == 1.0),
        "iters": args.iters,
    }


def _time(device: torch.device, x: torch.Tensor, warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        dist.all_reduce(x)
    dist.barrier()
    if device.type != "cuda":
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            dist.all_reduce(x)
            times.append(time.perf_counter() - start)
        return times
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        dist.all_reduce(x)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1000 for start, end in events]


if __name__ == "__main__":
    main()

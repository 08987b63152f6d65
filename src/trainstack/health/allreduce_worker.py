"""One rank of the all-reduce check; started by torchrun, one process per GPU (or CPU rank with gloo).

Run as ``python -m torch.distributed.run --standalone --nproc-per-node N -m
trainstack.health.allreduce_worker --bytes B --out FILE``. Rank 0 writes the result
as JSON to FILE.

Across nodes (``--nnodes`` and a c10d rendezvous, under srun or a Kubernetes Job) ``--sizes``
measures a sweep as nccl-tests prints it: per message size the algorithm and bus bandwidth
(``busbw = algbw * 2(n-1)/n``), the nodes named; with three nodes or more each pair of nodes
is measured on its own at the largest size, and a pair below 90% of the median of the nodes'
best pairs is slow (allreduce_pairs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from trainstack.health.allreduce_pairs import mark_slow


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, default=0)
    parser.add_argument("--sizes", default="", help="comma-separated message sizes in bytes: a sweep across nodes")
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
        result = _sweep(device, rank, world, args) if args.sizes else _measure(device, rank, world, args)
        if rank == 0:
            args.out.write_text(json.dumps(result), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def _sweep(device: torch.device, rank: int, world: int, args: argparse.Namespace) -> dict:
    """Every size over all ranks, then each node pair on its own; the nodes named."""
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    names: list[str] = [""] * world
    dist.all_gather_object(names, node)
    nodes = sorted(set(names))
    rows = []
    for size in [int(x) for x in args.sizes.split(",") if x]:
        rows.append(_measure(device, rank, world, argparse.Namespace(**{**vars(args), "bytes": size})))
    pairs = []
    largest = max(rows, key=lambda r: r["bytes"]) if rows else None
    if len(nodes) == 2 and largest:
        pairs.append({"nodes": nodes, "bytes": largest["bytes"], "busbw_gbps": largest["busbw_gbps"]})
    elif len(nodes) > 2 and largest:
        for a, b in itertools.combinations(nodes, 2):
            ranks = [r for r, n in enumerate(names) if n in (a, b)]
            group = dist.new_group(ranks)  # every rank makes every group, in the same order
            if rank in ranks:
                pairs.append({"nodes": [a, b], **_group_busbw(device, group, len(ranks), largest["bytes"], args)})
        gathered: list[list[dict]] = [[] for _ in range(world)]
        dist.all_gather_object(gathered, pairs if rank == min(r for r, n in enumerate(names) if n == node) else [])
        pairs = sorted({tuple(p["nodes"]): p for ps in gathered for p in ps}.values(), key=lambda p: p["nodes"])
    return {
        "kind": "allreduce",
        "schema_version": 1,
        "backend": args.backend,
        "world_size": world,
        "nodes": nodes,
        "ranks": names,
        "sizes": rows,
        "pairs": mark_slow(pairs),
    }


def _group_busbw(device: torch.device, group: dist.ProcessGroup, n: int, nbytes: int, args: argparse.Namespace) -> dict:
    x = torch.ones(nbytes // 4, device=device)  # (numel,) float32
    times = _time(device, x, args.warmup, args.iters, group=group)
    seconds = statistics.median(times)
    algbw = nbytes / seconds / 1e9
    return {"bytes": nbytes, "busbw_gbps": algbw * 2 * (n - 1) / n}


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


def _time(device: torch.device, x: torch.Tensor, warmup: int, iters: int, group: dist.ProcessGroup | None = None) -> list[float]:
    for _ in range(warmup):
        dist.all_reduce(x, group=group)
    dist.barrier(group=group)
    if device.type != "cuda":
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            dist.all_reduce(x, group=group)
            times.append(time.perf_counter() - start)
        return times
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    torch.cuda.synchronize()
    for begin, end in events:
        begin.record()
        dist.all_reduce(x, group=group)
        end.record()
    torch.cuda.synchronize()
    return [begin.elapsed_time(end) / 1000 for begin, end in events]


if __name__ == "__main__":
    main()

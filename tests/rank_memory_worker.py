"""One rank of the per-rank memory check (tests/test_memplan_ranks.py), under torchrun on
the CPU: the tiny preset sharded with FSDP2 (with CPUOffloadPolicy where asked), one step to
make the optimizer state, then one step under torch's FSDPMemTracker; without and then with offload; the bytes it saw per
kind (after backward, and at the step's peak) and glibc's count of the process's heap around
the state's creation go to OUT/rank<N>.json. ``whole``: the step's peak without offload at
each of WHOLE_STEP's (batch, seq) too (the 4-rank launch measures only these)."""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

from trainstack.nn.decoder import Transformer
from trainstack.nn.presets import preset


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_bytes() -> int:
    """Bytes the process has allocated through malloc (glibc's mallinfo2: in use plus mmapped)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


# (batch, seq) of the whole-step peaks: one where the activations and the loss set the peak,
# one so short that the state and FSDP2's buffers do (a block's reduce-scatter)
WHOLE_STEP = ((2, 64), (1, 16))


def main(out: Path, batch: int, seq: int, kinds: str = "plain,offload") -> None:
    dist.init_process_group("gloo")
    result: dict = {how: measure(offload=how == "offload", batch=batch, seq=seq) for how in kinds.split(",") if how}
    result["whole"] = {f"{b}x{s}": measure(offload=False, batch=b, seq=s)["peak"]["Total"] for b, s in WHOLE_STEP}
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def measure(*, offload: bool, batch: int, seq: int) -> dict:
    torch.manual_seed(0)
    cfg = preset("tiny")
    model = Transformer(cfg)
    policy = {"offload_policy": CPUOffloadPolicy(pin_memory=False)} if offload else {}
    last = len(model.layers) - 1
    for i, block in enumerate(model.layers):
        fully_shard(block, reshard_after_forward=i < last, **policy)
    fully_shard(model, **policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(dist.get_rank()))

    loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    dist.barrier()  # the backward's collectives done on every rank before the heap is read
    before = heap_bytes()
    opt.step()  # the first step makes AdamW's state
    state_heap = heap_bytes() - before
    opt.zero_grad(set_to_none=True)

    tracker = FSDPMemTracker(model, opt)
    tracker.track_inputs((tokens,))
    with tracker:
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        after_backward = {str(k).split(".")[-1]: v for k, v in tracker.get_tracker_snapshot()[torch.device("cpu")].items()}
        opt.step()
        opt.zero_grad(set_to_none=True)
    peak = {str(k).split(".")[-1]: v for k, v in tracker.get_tracker_snapshot("peak")[torch.device("cpu")].items()}
    local = {"params": sum(p.to_local().numel() * p.element_size() for p in model.parameters())}
    return {"after_backward": after_backward, "peak": peak, "state_heap": state_heap, "local": local}


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:5])

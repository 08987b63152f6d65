"""A user's FSDP2 job as trainstack run finds it: the job shards its own model.

torchrun --nproc-per-node N fsdp2_loop.py --steps S [--batch B] [--seq T] [--offload]:
trainstack's tiny decoder (the job's model here), each block and then the model under
``fully_shard`` over gloo, with ``CPUOffloadPolicy`` when asked; rank 0 prints 'step i loss
X' as each step ends and, at the end, what each block recomputes ('blocks keep,full,...').
"""

import argparse

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

from trainstack.nn.decoder import Transformer
from trainstack.nn.presets import preset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--offload", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    cfg = preset("tiny")
    model = Transformer(cfg)
    policy = {"offload_policy": CPUOffloadPolicy(pin_memory=False)} if args.offload else {}
    for i, block in enumerate(model.layers):
        fully_shard(block, reshard_after_forward=i < len(model.layers) - 1, **policy)
    fully_shard(model, **policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    tokens = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=torch.Generator().manual_seed(dist.get_rank()))
    for step in range(args.steps):
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    if dist.get_rank() == 0:
        choices = [str(block.__dict__.get("_memplan_choice", "keep")) for block in model.layers]
        print("blocks " + ",".join(choices), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

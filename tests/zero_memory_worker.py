"""One rank of the per-rank ZeRO check (tests/test_bench_zero.py), under torchrun on the CPU:
the tiny preset in fp32 under DeepSpeed ZeRO at each stage asked for ("1", "2", "3"; torch's
for-loop AdamW, as bench's zero modes on a CPU; "2+offload": ZeRO-Offload, its state in host
memory and DeepSpeed's cpu_adam stepping it, as bench's zero2+offload), one step to make the
optimizer state; the bytes this rank holds of each kind go to OUT/rank<N>.json: its parameters
(stage 3: its partition), the fp32 copy of its partition the optimizer steps (DeepSpeed's
master weights), AdamW's moments and, offloaded, the fp32 gradient partition on the host."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from trainstack.nn.decoder import Transformer  # noqa: E402
from trainstack.nn.presets import preset  # noqa: E402


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measure(stage: str, batch: int, seq: int) -> dict:
    torch.manual_seed(0)
    cfg = preset("tiny")
    model = Transformer(cfg)
    zero_config: dict = {"stage": int(stage[0])}
    if stage.endswith("+offload"):
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        opt = DeepSpeedCPUAdam(model.parameters(), lr=1e-3, adamw_mode=True)
        zero_config["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    config = {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1, "train_batch_size": batch * dist.get_world_size(),
              "gradient_clipping": 0.0, "zero_optimization": zero_config, "bf16": {"enabled": False}, "steps_per_print": 1 << 30}
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=torch.Generator().manual_seed(dist.get_rank()))
    engine.backward(engine(tokens[:, :-1], tokens[:, 1:]))
    engine.step()
    zero = engine.optimizer
    moments = [v for state in zero.optimizer.state.values() for v in state.values() if torch.is_tensor(v) and v.dim() > 0]
    masters = getattr(zero, "single_partition_of_fp32_groups", None) or zero.fp32_partitioned_groups_flat
    params = [getattr(p, "ds_tensor", p) for p in model.parameters()]
    grads = [m.grad for m in masters if m.grad is not None] if stage.endswith("+offload") else []
    return {"params": nbytes(params), "master": nbytes(masters), "optimizer": nbytes(moments), "grads": nbytes(grads)}


def main(out: Path, batch: int, seq: int, stages: str) -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    result = {f"zero{s}": measure(s, batch, seq) for s in stages.split(",")}
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])

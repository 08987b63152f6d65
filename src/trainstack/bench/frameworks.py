"""The distributed frameworks a bench mode trains under: FSDP2 (``fully_shard``, with
CPUOffloadPolicy for ``offload``) and DeepSpeed ZeRO stages 1-3 (ZeRO-Offload for
``offload``), behind one small interface: a micro-batch's forward and backward, then the
optimizer's step after ``accum`` of them. Each says where every kind of state lives
(memplan.placement's kinds) and which optimizer kernel steps it.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch

from trainstack.bench import device as dev
from trainstack.bench.modes import ModeUnavailable, blocks
from trainstack.memplan.placement import KINDS, Layout
from trainstack.nn.modes import Mode

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule


@dataclass
class Trainer:
    """One framework's training step over micro-batches."""

    model: Any  # what is called on a micro-batch (the module, or DeepSpeed's engine)
    step_fn: Any  # the optimizer's step (and zero_grad)
    backward_fn: Any  # (loss, last micro-batch) -> None
    layout: Layout
    optimizer: str  # which kernel steps the state
    cpu_step: bool = False  # the step runs on the host's CPU
    cpu_step_seconds: list[float] = field(default_factory=list)  # the host's wall time of each step, where it runs there
    before_micro: Any = None  # (last micro-batch) -> None, before its forward
    opt: Any = None  # the torch optimizer (whose learning rate a schedule sets)

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor, last: bool) -> torch.Tensor:
        if self.before_micro is not None:
            self.before_micro(last)
        return self.model(inputs, targets)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.backward_fn(loss, last)

    def step(self) -> None:
        if not self.cpu_step:
            self.step_fn()
            return
        start = time.perf_counter()
        self.step_fn()
        self.cpu_step_seconds.append(time.perf_counter() - start)

    def where(self) -> dict[str, str]:
        return {k: str(self.layout.where(k)) for k in KINDS}


def needs_group(mode: Mode) -> bool:
    """The mode runs under a framework that needs a process group, even on one process."""
    return bool(mode.framework or mode.offload)


def ensure_group(device: torch.device) -> None:
    """A process group of one on the loopback address where torchrun made none (a framework
    on one GPU); the environment DeepSpeed reads is set to match."""
    if torch.distributed.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        os.environ.setdefault(key, value)
    backend = "nccl" if device.type == "cuda" else "gloo"
    torch.distributed.init_process_group(backend, init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", rank=0, world_size=1)


def plain(model: torch.nn.Module, opt: Any, accum: int, *, master: bool) -> Trainer:
    """One process, no framework: the loss of each micro-batch scaled by 1/accum."""

    def backward(loss: torch.Tensor, last: bool) -> None:
        (loss / accum if accum > 1 else loss).backward()

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    name = (
        "AdamW on fp32 master copies (bench.precision)"
        if master
        else f"torch AdamW ({'fused' if opt.defaults.get('fused') else 'for-loop or foreach'})"
    )
    return Trainer(model, step, backward, Layout("none", 1), name, opt=opt)


def fsdp2(model: torch.nn.Module, mode: Mode, lr: float, device: torch.device, dist: dev.Dist, accum: int) -> Trainer:
    """FSDP2 over the ranks: each block one all-gather unit (the last stays gathered for
    backward); gradients synchronised on the last micro-batch only; with ``offload``,
    CPUOffloadPolicy keeps parameters, gradients and AdamW's state on the host and the
    optimizer steps there."""
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch before 2.6 keeps FSDP2 under its composable APIs
        from torch.distributed._composable.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if device.type == "cuda" else MixedPrecisionPolicy()
    )
    extra: dict[str, Any] = {"offload_policy": CPUOffloadPolicy(pin_memory=device.type == "cuda")} if mode.offload else {}
    layers = blocks(model)
    last = len(layers) - 1
    for i, block in enumerate(layers):
        fully_shard(block, mp_policy=policy, reshard_after_forward=i < last, **extra)
    fully_shard(model, mp_policy=policy, **extra)
    sharded = cast("FSDPModule", model)  # fully_shard gave the model FSDPModule's methods in place (its class swapped)
    on_gpu = device.type == "cuda" and not mode.offload
    opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=on_gpu or None, foreach=None if on_gpu else False)

    def before(last_micro: bool) -> None:
        if accum > 1:
            sharded.set_requires_gradient_sync(last_micro)

    def backward(loss: torch.Tensor, last_micro: bool) -> None:
        (loss / accum if accum > 1 else loss).backward()

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    offload = frozenset(KINDS) if mode.offload else frozenset()
    name = "torch AdamW on the CPU (for-loop)" if mode.offload else f"torch AdamW ({'fused' if on_gpu else 'for-loop'})"
    return Trainer(
        model, step, backward, Layout("fsdp2", dist.world_size, offload), name, cpu_step=mode.offload, before_micro=before, opt=opt
    )


def deepspeed_engine(
    model: torch.nn.Module, mode: Mode, lr: float, device: torch.device, dist: dev.Dist, *, batch: int, accum: int
) -> Trainer:
    """DeepSpeed ZeRO at the mode's stage; with ``offload``, ZeRO-Offload (master weights,
    AdamW state and fp32 gradients on the host, its cpu_adam op stepping them). Clipping is
    off, as in every other mode (DeepSpeed clips at 1.0 unless told)."""
    if device.type != "cuda":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
    except ImportError:
        raise ModeUnavailable("deepspeed is not installed (pip install deepspeed)") from None
    zero: dict[str, Any] = {"stage": mode.zero_stage}
    if mode.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": device.type == "cuda"}
    config = {
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": accum,
        "train_batch_size": batch * accum * dist.world_size,
        "gradient_clipping": 0.0,
        "zero_optimization": zero,
        "bf16": {"enabled": device.type == "cuda"},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    opt, name = _deepspeed_optimizer(model, lr, device, offload=mode.offload)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)

    def backward(loss: torch.Tensor, last: bool) -> None:
        engine.backward(loss)
        if not last:
            engine.step()  # DeepSpeed counts micro-batches here; it steps the optimizer on the last

    shard = {1: "zero1", 2: "zero2", 3: "zero3"}[mode.zero_stage]
    offload = frozenset({"optimizer", "master", "grads"}) if mode.offload else frozenset()
    return Trainer(
        engine, engine.step, backward, Layout(shard, dist.world_size, offload), name, cpu_step=mode.offload, opt=engine.optimizer
    )


def _deepspeed_optimizer(model: torch.nn.Module, lr: float, device: torch.device, *, offload: bool) -> tuple[Any, str]:
    """The optimizer DeepSpeed wraps, and its name: with offload DeepSpeed's own cpu_adam op
    (prebuilt in the stack where it was, else compiled now by DeepSpeed's JIT), else torch's
    AdamW (fused on a GPU), the same kernel one process uses."""
    if not offload:
        fused = device.type == "cuda"
        return torch.optim.AdamW(
            model.parameters(), lr=lr, fused=fused or None, foreach=None if fused else False
        ), f"torch AdamW ({'fused' if fused else 'for-loop'}) under ZeRO"
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        installed_ops = {}
    built = "prebuilt" if installed_ops.get("cpu_adam") else "JIT-built"
    opt = DeepSpeedCPUAdam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, adamw_mode=True)
    return opt, f"DeepSpeed cpu_adam ({built})"

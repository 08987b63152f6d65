"""One benchmark run: build the model in a mode, train on synthetic tokens, measure.

Runs in the calling process. Under torchrun (WORLD_SIZE > 1) every block and then the
whole model are sharded with FSDP2 (bf16 parameters for compute, fp32 master weights
and gradient reduction); on one GPU the model keeps fp32 weights under bf16 autocast,
or, in a ``bf16`` mode, bf16 parameters with fp32 master weights and AdamW state.
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import cast

import torch
from torch.profiler import record_function

from trainstack.bench import device as dev
from trainstack.bench import flash, fp8
from trainstack.bench.ceilings import ceilings, with_rates
from trainstack.bench.frameworks import Trainer, deepspeed_engine, ensure_group, fsdp2, needs_group, plain
from trainstack.bench.host_optimizer import HOST_RUNGS, HostAdamW, to_bf16_with_host_state
from trainstack.bench.mfu import class_work, flops_per_token, flops_per_token_causal, mfu, mfu_causal, mfu_fp8
from trainstack.bench.modes import ModeUnavailable, apply_checkpointing, apply_compile, apply_planned, blocks
from trainstack.bench.parity import lr_factor, markov_tokens
from trainstack.bench.peaks import peak_for
from trainstack.bench.precision import to_bf16_with_master
from trainstack.bench.profile import profile_steps
from trainstack.memplan.budget import host_memory_bytes
from trainstack.memplan.offload import Placement
from trainstack.memplan.placement import KINDS, Layout
from trainstack.memplan.rates import measure_rates
from trainstack.nn.decoder import ModelConfig, Transformer
from trainstack.nn.hf import HfShape, build_hf_model
from trainstack.nn.modes import Mode, parse_mode

# Distinct synthetic batches cycled through, generated on the device once.
_BATCHES = 4
PROFILE_STEPS = 2


@dataclass
class RunSpec:
    model: str
    cfg: ModelConfig | HfShape
    mode: Mode = Mode()  # parsed once, where the user named it
    batch: int = 1
    seq: int = 512
    steps: int = 20
    warmup: int = 3
    device: str = "auto"
    memory_cap_bytes: int | None = None
    lr: float = 3e-4
    seed: int = 0
    profile_dir: str | None = None  # profile PROFILE_STEPS more steps after the timed ones
    task: str = "random"  # the tokens: "random" (uniform) or "markov" (learnable: bench.parity)
    lr_schedule: bool = False  # bench.parity's warm-up and cosine decay over warmup + steps; else constant
    breakdown: bool = True  # profile PROFILE_STEPS more steps: the row's time per class (bench.kernels)
    health: dict | None = None  # the GPU's measured ceilings (bench.ceilings.read_health)
    accum: int = 1  # micro-batches of ``batch`` sequences per optimizer step (a timed step is one optimizer step)

    def to_json(self) -> dict:
        data = asdict(self)
        data["cfg"] = self.cfg.to_dict()
        data["mode"] = self.mode.name
        return data

    @classmethod
    def from_json(cls, data: dict) -> RunSpec:
        cfg = HfShape(**data["cfg"]) if "path" in data["cfg"] else ModelConfig(**data["cfg"])
        return cls(**{**data, "cfg": cfg, "mode": parse_mode(data["mode"])})


@dataclass
class Measured:
    step_seconds: list[float]
    warmup_seconds: float
    losses: list[float]
    mem_allocated: int | None
    mem_reserved: int | None
    sdpa: str = "n/a"
    plan: str | None = None
    extra: dict = field(default_factory=dict)


def run(spec: RunSpec) -> dict:
    """Run ``spec`` and return its result row; an OOM or an unavailable mode becomes the row's status."""
    # segments that grow in place: less fragmentation, fewer cudaMalloc calls (read at CUDA init)
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    dist = dev.dist_from_env()
    device = dev.pick_device(spec.device, dist)
    dev.init_process_group(dist, device)
    row = _base_row(spec, device, dist)
    try:
        measured = measure(spec, device, dist)
    except ModeUnavailable as exc:
        return {**row, "status": "unavailable", "error": str(exc)}
    except Exception as exc:  # only OOMs are reported as rows; anything else propagates
        if not dev.is_oom(exc):
            raise
        return {**row, "status": "oom", "error": _first_line(exc)}
    return {**row, **summarise(spec, measured, row, dist)}


def measure(spec: RunSpec, device: torch.device, dist: dev.Dist) -> Measured:
    dev.cap_memory(device, spec.memory_cap_bytes)
    torch.manual_seed(spec.seed)  # the same initial weights on every rank; data differs by rank
    built = build(spec, spec.mode, device, dist)
    model, mode = built.model, built.mode
    trainer = make_trainer(model, mode, spec, device, dist, built.host_kinds)
    batches = synthetic_batches(spec, device, dist)
    autocast = device.type == "cuda" and not dist.enabled and not mode.bf16 and not (mode.framework or mode.offload)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if autocast else nullcontext()
    accum = spec.accum

    def step(i: int) -> torch.Tensor:
        # the ranges name each phase for the breakdown (bench.profile); a few microseconds unprofiled
        losses = []
        if spec.lr_schedule:  # before the micro-batches: an optimizer may start its step during the last one
            set_lr(trainer.opt, spec.lr * lr_factor(i, spec.warmup + spec.steps))
        for j in range(accum):
            tokens = batches[(i * accum + j) % len(batches)]
            last = j == accum - 1
            with record_function("trainstack.forward"), amp:
                loss = trainer.forward(tokens[:, :-1], tokens[:, 1:], last)
            with record_function("trainstack.backward"):
                trainer.backward(loss, last)
            losses.append(loss.detach().float())
        with record_function("trainstack.optimizer"):
            trainer.step()
        return torch.stack(losses).mean() if accum > 1 else losses[0]

    losses: list[torch.Tensor] = []
    cfg = spec.cfg
    order, sdpa_ms = dev.fastest_sdpa_order(
        device, batch=spec.batch, seq=spec.seq, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, head_dim=cfg.head_dim
    )
    with dev.sdpa_context(device, order):
        sdpa = _sdpa_choice(spec, device)
        start = time.perf_counter()
        for i in range(spec.warmup):
            losses.append(step(i))
        dev.synchronize(device)
        warmup_seconds = time.perf_counter() - start
        dev.reset_peak_memory(device)
        timer = dev.StepTimer(device)
        timer.mark()
        for i in range(spec.warmup, spec.warmup + spec.steps):
            losses.append(step(i))
            timer.mark()
        seconds = timer.step_seconds()
        allocated, reserved = dev.peak_memory(device)
        extra = _profile(spec, step, device, dist) if spec.profile_dir or spec.breakdown else {}
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    extra |= {
        "params_per_rank": local,
        "sdpa_ms": {name.lower(): ms for name, ms in sdpa_ms.items()},
        "framework": mode.framework or ("fsdp2" if dist.enabled else "none"),
        "accum": accum,
        "state_lived": trainer.where(),
        "optimizer": trainer.optimizer,
        "precision": _precision(device, dist, mode),
    }  # the mode as planned: a plan may put state on the host
    if isinstance(trainer.opt, HostAdamW):
        extra["host_optimizer"] = host_summary(trainer.opt, spec)
    if trainer.cpu_step_seconds:
        timed = trainer.cpu_step_seconds[spec.warmup : spec.warmup + spec.steps] or trainer.cpu_step_seconds
        extra["cpu_optimizer_ms_per_step"] = statistics.median(timed) * 1e3
    if built.fp8_note:
        extra["fp8"] = built.fp8_note
    extra |= built.predicted
    return Measured(seconds, warmup_seconds, _mean_over_ranks(torch.stack(losses), dist), allocated, reserved, sdpa, built.plan, extra)


def _mean_over_ranks(losses: torch.Tensor, dist: dev.Dist) -> list[float]:
    """Each step's loss over all the ranks' sequences (the ranks' means averaged: equal shares)."""
    if not dist.enabled:
        return losses.tolist()
    t = losses.to(torch.float64)
    if torch.distributed.get_backend() != "nccl":
        t = t.cpu()
    torch.distributed.all_reduce(t)
    return (t / dist.world_size).tolist()


def make_trainer(
    model: torch.nn.Module, mode: Mode, spec: RunSpec, device: torch.device, dist: dev.Dist, host_kinds: frozenset[str] | None = None
) -> Trainer:
    """The mode's framework around ``model``: DeepSpeed ZeRO, FSDP2 (under torchrun, or on one
    process where the mode names it or offloads, in a group of its own), bench's own host
    optimizer (a ``bf16`` mode offloaded on one process: memplan's rung, or master weights and
    optimizer state for ``offload``), or none."""
    if host_optimizer_mode(mode, dist):
        kinds = host_kinds or frozenset({"optimizer", "master"})
        return host_offload(model, to_bf16_with_host_state(model, lr=spec.lr, kinds=kinds), spec.accum)
    if needs_group(mode):
        ensure_group(device)
    if mode.zero_stage:
        return deepspeed_engine(model, mode, spec.lr, device, dist, batch=spec.batch, accum=spec.accum)
    if dist.enabled or mode.framework == "fsdp2" or mode.offload:
        return fsdp2(model, mode, spec.lr, device, dist, spec.accum)
    opt = optimizer(model, mode, spec.lr, device, dist)
    return plain(model, opt, spec.accum, master=master_weights(mode, dist))


def _profile(spec: RunSpec, step, device: torch.device, dist: dev.Dist) -> dict:
    """Profile a few more steps (after the timed ones, so their figures stand): their
    breakdown, and with a profile folder the paths of the trace and the kernel table."""
    from pathlib import Path

    stem = None
    if spec.profile_dir:
        rank = f"-rank{dist.rank}" if dist.enabled else ""
        mode = spec.mode.name.replace("+", "_")  # a name any file system and copy tool takes
        stem = Path(spec.profile_dir) / f"profile-{spec.model}-{mode}-b{spec.batch}-s{spec.seq}{rank}"
    first = spec.warmup + spec.steps
    result = profile_steps(step, first, PROFILE_STEPS, stem, device)
    split = result.pop("breakdown")
    return ({"profile": result} if stem is not None else {}) | ({"breakdown": split} if spec.breakdown else {})


def synthetic_batches(spec: RunSpec, device: torch.device, dist: dev.Dist) -> torch.Tensor:
    """(n, batch, seq + 1) tokens, the same in every mode: uniform random tokens (a few
    batches, cycled), or for the ``markov`` task one learnable batch per step."""
    if spec.task == "markov":
        return markov_tokens(
            spec.cfg.vocab_size, (spec.warmup + spec.steps, spec.batch, spec.seq + 1), device=device, seed=spec.seed + dist.rank
        )
    # a generator of its own: the same tokens in every mode, whatever a mode draws from the global one;
    # the ranks take their shares of one global batch, so N ranks see what one process of N times the batch sees
    gen = torch.Generator(device).manual_seed(spec.seed)
    n = max(_BATCHES, spec.accum)
    tokens = torch.randint(0, spec.cfg.vocab_size, (n, dist.world_size * spec.batch, spec.seq + 1), device=device, generator=gen)
    return tokens[:, dist.rank * spec.batch : (dist.rank + 1) * spec.batch].contiguous()


@dataclass
class Built:
    """The model ``build`` made and what went into it."""

    model: torch.nn.Module
    plan: str | None  # memplan's plan in one line (None: not planned)
    fp8_note: str | None  # what float8 converted (None: unused)
    mode: Mode  # the mode as planned (``offload`` where the plan chose it)
    host_kinds: frozenset[str] | None  # the kinds the plan put on the host for bench's host optimizer
    predicted: dict = field(default_factory=dict)  # the plan's predicted peaks, beside the measured ones in the row


def build(spec: RunSpec, mode: Mode, device: torch.device, dist: dev.Dist) -> Built:
    """The model on ``device`` with float8 layers, checkpointing and compile applied, in that
    order (the framework shards it: make_trainer)."""
    fp8_note = None
    if mode.fp8:
        fp8.require(device)
    if mode.flash:
        flash.require(device)
    model = _new_model(spec.cfg, device)
    if mode.flash:
        flash.use_flash_attn(model)
    if mode.fp8:
        fp8_note = fp8.convert(model, mode.fp8).summary()
    plan, keep_budget, host_kinds, predicted = None, None, None, {}
    if mode.ac == "planned":
        budget = dev.memory_budget(device, spec.memory_cap_bytes)
        model, chosen = apply_planned(
            model,
            spec.cfg,
            batch=spec.batch,
            seq=spec.seq,
            budget_bytes=budget,
            world_size=dist.world_size,
            compiled=mode.compile,
            precision=planned_precision(mode, dist, device),
            placement=bench_placement(spec, mode, dist, device),
        )
        plan = chosen.summary() if hasattr(chosen, "summary") else _first_line(chosen)
        keep_budget = getattr(chosen, "compiler_budget", None)
        predicted = plan_predicted(chosen)
        layout = getattr(chosen, "layout", None)
        if layout is not None and layout.offload and host_optimizer_mode(replace(mode, offload=True), dist):
            host_kinds = frozenset(layout.offload)
            mode = replace(mode, offload=True)
            plan += f" ({_first_line(chosen.why)})"
        elif layout is not None and layout.offload and not mode.offload:
            mode = replace(mode, offload=True, framework=mode.framework or "fsdp2")
            plan += f" ({_first_line(chosen.why)})"
    else:
        apply_checkpointing(model, mode)
    if mode.compile:
        apply_compile(model, keep_budget)
    return Built(model, plan, fp8_note, mode, host_kinds, predicted)


def plan_predicted(chosen: object) -> dict:
    """memplan's prediction for the plan it chose, in GiB (and its step estimate), for the row:
    an empty dict where the plan is not memplan's ``Plan`` (a plain string: nothing fits)."""
    b = getattr(chosen, "breakdown", None)
    if b is None:
        return {}
    cost = getattr(chosen, "step_cost", None)
    return {
        "plan_predicted": {
            "allocated_gib": b.allocated_peak / 2**30,
            "reserved_gib": b.reserved_peak / 2**30,
            "host_gib": b.host_bytes / 2**30,
            "step_s": getattr(cost, "total_s", None),
        }
    }


def planned_precision(mode: Mode, dist: dev.Dist, device: torch.device) -> str:
    """How memplan names the mode's weights: bf16 parameters with fp32 master weights (a bf16
    mode on one process, or a framework's mixed precision on a GPU), else fp32 under autocast."""
    framework = mode.framework or mode.offload or dist.enabled
    return "bf16" if master_weights(mode, dist) or (framework and device.type == "cuda") else "autocast-bf16"


def bench_placement(spec: RunSpec, mode: Mode, dist: dev.Dist, device: torch.device):
    """What memplan places for a planned mode: the framework's sharding, its accumulation,
    and the offload the framework can run (FSDP2's CPUOffloadPolicy: every kind on the host;
    ZeRO-Offload: gradients, master weights and optimizer state), chosen where the budget
    needs it or fixed by ``offload``; rates measured here. None (recompute alone, as memplan
    plans one process) for a plain mode on one process without accumulation."""
    if not (mode.framework or mode.offload or dist.enabled or spec.accum > 1):
        return None
    if host_optimizer_mode(replace(mode, offload=True), dist):  # bench's host optimizer: its two rungs
        host = host_memory_bytes()
        return Placement(
            shard="none",
            offload=HOST_RUNGS[-1] if mode.offload else None,
            accum=spec.accum,
            ladder=(frozenset(), *HOST_RUNGS),
            host_budget_bytes=int(host * 0.9) if host else None,
            rates=measure_rates(device),
        )
    shard = mode.framework or ("fsdp2" if dist.enabled or mode.offload else "none")
    kinds = frozenset({"optimizer", "master", "grads"}) if mode.zero_stage else frozenset(KINDS)
    host = host_memory_bytes()
    return Placement(
        shard=shard,
        offload=kinds if mode.offload else None,
        accum=spec.accum,
        ladder=(frozenset(), kinds),
        host_budget_bytes=int(host * 0.9) if host else None,
        rates=measure_rates(device),
    )


def host_optimizer_mode(mode: Mode, dist: dev.Dist) -> bool:
    """Whether bench's own host optimizer runs the mode: bf16 parameters offloaded on one
    process without a framework (``bf16+offload``, or a ``planned`` bf16 mode whose plan
    offloads)."""
    return mode.bf16 and mode.offload and not mode.framework and not dist.enabled


def host_offload(model: torch.nn.Module, opt: HostAdamW, accum: int) -> Trainer:
    """bench's host optimizer as a trainer: bf16 gradients accumulate on the device; the last
    micro-batch arms the optimizer so final gradients start the step during its backward."""
    trainer = plain(model, opt, accum, master=True)
    trainer.before_micro = opt.arm
    trainer.layout = Layout("none", 1, opt.kinds)
    trainer.optimizer = f"AdamW on fp32 state in host memory ({'on the CPU' if opt.on_cpu else 'moments streamed'}, {opt.kernel} kernel, bench.host_optimizer)"
    trainer.cpu_step = opt.on_cpu
    return trainer


def host_summary(opt: HostAdamW, spec: RunSpec) -> dict:
    """The host optimizer's timed steps: median bytes each way, CPU update and exposed wait."""
    timed = opt.history[spec.warmup : spec.warmup + spec.steps] or opt.history
    rows = [s.to_json() for s in timed]
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]} if rows else {}


def master_weights(mode: Mode, dist: dev.Dist) -> bool:
    """Whether the mode trains bf16 parameters with fp32 master weights (a ``bf16`` mode on
    one process; FSDP keeps its own fp32 copies), as memplan must plan it."""
    return mode.bf16 and not dist.enabled


def set_lr(opt, lr: float) -> None:
    """The learning rate of every parameter group (torch's optimizers and MasterAdamW alike)."""
    for group in opt.param_groups:
        group["lr"] = lr


def optimizer(model: torch.nn.Module, mode: Mode, lr: float, device: torch.device, dist: dev.Dist):
    """Fused AdamW on the model's parameters; for a ``bf16`` mode on one process, the
    parameters become bf16 and AdamW runs on fp32 master copies (bench.precision)."""
    if master_weights(mode, dist):
        return to_bf16_with_master(model, lr=lr, compiled=mode.compile)
    return torch.optim.AdamW(model.parameters(), lr=lr, fused=device.type == "cuda")


def _new_model(cfg: ModelConfig | HfShape, device: torch.device) -> torch.nn.Module:
    if isinstance(cfg, HfShape):
        with device:
            return build_hf_model(cfg.path).float()
    with device:
        return Transformer(cfg)


def shard(model: torch.nn.Module, device: torch.device) -> None:
    """FSDP2: each block is one all-gather unit; the last block stays gathered for backward."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if device.type == "cuda" else MixedPrecisionPolicy()
    )
    layers = blocks(model)
    last = len(layers) - 1
    for i, block in enumerate(layers):
        fully_shard(block, mp_policy=policy, reshard_after_forward=i < last)
    fully_shard(model, mp_policy=policy)


def summarise(spec: RunSpec, m: Measured, row: dict, dist: dev.Dist) -> dict:
    """Figures for the row; under torchrun step times and memory are the worst over ranks."""
    seconds = _max_over_ranks(m.step_seconds, dist)
    allocated, reserved = (_max_over_ranks([float(x)], dist)[0] if x is not None else None for x in (m.mem_allocated, m.mem_reserved))
    median = statistics.median(seconds)
    deciles = statistics.quantiles(seconds, n=10, method="inclusive") if len(seconds) > 1 else [median] * 9
    per_gpu = spec.batch * spec.accum * spec.seq / median
    peak = peak_for(row["device_name"]) if row["device_type"] == "cuda" else None
    shape = _counted_shape(spec)
    fraction = mfu(per_gpu, shape, spec.seq, peak)
    fp8_basis = {"mfu_fp8": mfu_fp8(per_gpu, shape, spec.seq, peak), "peak_fp8_tflops": peak.fp8_tflops if peak else None}
    final = m.losses[-1]
    extra = dict(m.extra)
    if "breakdown" in extra:
        # a profiled step is one optimizer step: all its micro-batches
        work = class_work(shape, batch=spec.batch * spec.accum, seq=spec.seq, params=extra.get("params_per_rank") or row["params"])
        health = spec.health if row["device_type"] == "cuda" else None  # a GPU's ceilings are no CPU's
        extra["breakdown"] = with_rates(extra["breakdown"], work, ceilings(peak, health, fp8=bool(spec.mode.fp8)))
    return {
        "status": "ok" if math.isfinite(final) else "error",
        "error": None if math.isfinite(final) else f"final loss is not finite ({final})",
        "tokens_per_s_per_gpu": per_gpu,
        "tokens_per_s_total": per_gpu * dist.world_size,
        "nodes": _nodes(dist),
        "mfu": fraction,
        "mfu_causal": mfu_causal(per_gpu, shape, spec.seq, peak),
        "peak_tflops": peak.bf16_tflops if peak else None,
        "peak_source": peak.source if peak else None,
        **(fp8_basis if spec.mode.fp8 else {}),
        "achieved_tflops_per_gpu": per_gpu * row["flops_per_token"] / 1e12,
        "step_ms_median": median * 1e3,
        "step_ms_p10": deciles[0] * 1e3,
        "step_ms_p90": deciles[8] * 1e3,
        "timed_steps": len(seconds),
        "warmup_s": m.warmup_seconds,
        "mem_allocated_gib": allocated / 2**30 if allocated is not None else None,
        "mem_reserved_gib": reserved / 2**30 if reserved is not None else None,
        "loss_first": m.losses[0],
        "loss_final": final,
        "sdpa_backend": m.sdpa,
        "plan": m.plan,
        **({"losses": m.losses} if spec.task == "markov" else {}),
        **extra,
    }


def _counted_shape(spec: RunSpec) -> ModelConfig:
    """The model's shape as bench.mfu counts its FLOPs: an HfShape has what those counts read
    (n_layers, dim, non_embedding_params()) as a ModelConfig has."""
    return cast(ModelConfig, spec.cfg)


def _base_row(spec: RunSpec, device: torch.device, dist: dev.Dist) -> dict:
    cfg = spec.cfg
    return {
        "model": spec.model,
        "mode": spec.mode.name,
        "batch": spec.batch,
        "seq": spec.seq,
        "world_size": dist.world_size,
        "device_type": device.type,
        "device_name": dev.device_name(device),
        "precision": _precision(device, dist, spec.mode),
        "params": cfg.total_params(),
        "non_embedding_params": cfg.non_embedding_params(),
        "flops_per_token": flops_per_token(_counted_shape(spec), spec.seq),
        "flops_per_token_causal": flops_per_token_causal(_counted_shape(spec), spec.seq),
        "steps": spec.steps,
        "warmup_steps": spec.warmup,
        "seed": spec.seed,
        "torch": torch.__version__,
        "cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "memory_cap_gib": spec.memory_cap_bytes / 2**30 if spec.memory_cap_bytes else None,  # --memory-cap-gib
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": cfg.to_dict(),
    }


def _precision(device: torch.device, dist: dev.Dist, mode: Mode) -> str:
    if host_optimizer_mode(mode, dist):
        return "bf16 params and gradients on the device, fp32 master weights and AdamW state in host memory (bench.host_optimizer)"
    if mode.framework or mode.offload:
        name = {"fsdp2": "FSDP2", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}[mode.framework or "fsdp2"]
        return f"{name}{' with offload' if mode.offload else ''} over {dist.world_size} rank{'s' if dist.world_size > 1 else ''}, " + (
            "bf16 params, fp32 master and optimizer state" if device.type == "cuda" else "fp32"
        )
    if dist.enabled:
        return f"FSDP2 over {dist.world_size} ranks, " + ("bf16 params, fp32 master and reduction" if device.type == "cuda" else "fp32")
    fp8 = f" + float8 linear layers ({mode.fp8} scaling)" if mode.fp8 else ""
    if mode.bf16:
        return "bf16 params, fp32 master weights and AdamW state" + fp8
    return ("bf16 autocast, fp32 weights" if device.type == "cuda" else "fp32") + fp8


def _sdpa_choice(spec: RunSpec, device: torch.device) -> str:
    cfg = spec.cfg
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    q = torch.empty(spec.batch, cfg.n_heads, spec.seq, cfg.head_dim, device=device, dtype=dtype, requires_grad=True)
    kv = torch.empty(spec.batch, cfg.n_kv_heads, spec.seq, cfg.head_dim, device=device, dtype=dtype, requires_grad=True)
    return dev.sdpa_backend(q, kv, kv, cfg.n_heads != cfg.n_kv_heads)


def _max_over_ranks(values: list[float], dist: dev.Dist) -> list[float]:
    if not dist.enabled:
        return values
    t = torch.tensor(
        values, dtype=torch.float64, device="cuda" if torch.cuda.is_available() and torch.distributed.get_backend() == "nccl" else "cpu"
    )
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return t.tolist()


def _nodes(dist: dev.Dist) -> list[str]:
    """The nodes the ranks ran on (Slurm's names, else hostnames), each once, in rank order."""
    here = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if not dist.enabled:
        return [here]
    names: list[str] = [""] * dist.world_size
    torch.distributed.all_gather_object(names, here)
    return list(dict.fromkeys(names))


def _first_line(obj: object) -> str:
    text = str(obj).strip()
    return text.splitlines()[0][:300] if text else type(obj).__name__

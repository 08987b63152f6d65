"""Calibration: measure one block and the rest of the model on fake tensors.

Under ``FakeTensorMode`` nothing is allocated or computed, yet every op runs with its real
shapes, dtypes, autocast casts and attention kernel choice. A dispatch mode follows each
storage an op creates until it is freed, which gives the saved bytes of a block (what is
still alive after its forward), the peaks of forward and backward, and per-op FLOPs and
bytes for the recompute cost. The block is wrapped exactly as ``apply`` wraps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from trainstack.memplan.wrappers import compile_block, save_ops, wrap
from trainstack.memplan.plan import BlockCost, Choice, HeadCost, Profile

if TYPE_CHECKING:
    from torch import nn

    from trainstack.nn.decoder import ModelConfig


@dataclass(frozen=True)
class Roofline:
    """Rates that turn FLOPs, bytes and op counts into estimated times, to rank plans.

    GPU: ``flops_per_s`` (bf16 matmul) and ``bytes_per_s`` (device copy, read + write).
    Host: ``host_op_s`` per op issued in eager mode; ``full_op_s`` and ``selective_op_s``
    added per op of a block's forward when the block is fully or selectively recomputed
    (selective runs every op through a Python dispatch mode, twice). Defaults: as
    benchmarks/memplan_h200.py measured them on an H200, torch 2.11
    (benchmarks/results/memplan_h200_b74b7db.txt). Where a GPU is at hand, ``time_block``
    replaces these estimates by measured block times.
    """

    flops_per_s: float = 7.84e14
    bytes_per_s: float = 4.13e12
    host_op_s: float = 6.07e-6
    full_op_s: float = 14.14e-6
    selective_op_s: float = 36.22e-6

    def seconds(self, flops: float, nbytes: int) -> float:
        return max(flops / self.flops_per_s, nbytes / self.bytes_per_s)


def _dispatch_mode_base() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


@dataclass
class _OpCost:
    ops: int = 0  # ops dispatched
    flops: float = 0.0
    seconds: float = 0.0
    saved_flops: float = 0.0  # the part selective recompute keeps (matmuls, attention)
    saved_seconds: float = 0.0
    largest: int = 0  # the largest single allocation, temporaries included


@dataclass
class _State:
    live: dict[int, tuple[Any, int]] = field(default_factory=dict)  # storage id -> (weak ref, bytes)
    peak: int = 0
    cost: _OpCost = field(default_factory=_OpCost)
    # storages to follow (storage id -> (weak ref, bytes)), and how many of their bytes had
    # been freed when the peak was reached
    watched: dict[int, tuple[Any, int]] = field(default_factory=dict)
    watched_gone_at_peak: int = 0


def _tracker(roofline: Roofline) -> Any:
    """A dispatch mode that follows storages created under it, and counts FLOPs and bytes."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    class LiveBytes(_dispatch_mode_base()):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.state = _State()

        @property
        def live(self) -> int:
            self._prune()
            return sum(n for _, n in self.state.live.values())

        def live_with(self, tensor: Any) -> int:
            """Bytes live, ``tensor``'s storage among them (once: made under this mode, it is
            counted already)."""
            self._prune()
            ref = StorageWeakRef(tensor.untyped_storage())
            return self.live + (0 if ref.cdata in self.state.live else tensor.untyped_storage().nbytes())

        def watched_gone(self) -> int:
            return sum(n for ref, n in self.state.watched.values() if ref.expired())

        def reset_peak(self) -> None:
            self.state.peak = self.live
            self.state.watched_gone_at_peak = self.watched_gone()

        def reset_cost(self) -> None:
            self.state.cost = _OpCost()

        def _prune(self) -> None:
            dead = [k for k, (ref, _) in self.state.live.items() if ref.expired()]
            for k in dead:
                del self.state.live[k]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = _run_op(func, args, kwargs)
            ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            in_ids = {StorageWeakRef(t.untyped_storage()).cdata for t in ins}
            self._prune()
            new_bytes = 0
            for t in outs:
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                if ref.cdata not in in_ids and ref.cdata not in self.state.live:
                    self.state.live[ref.cdata] = (ref, storage.nbytes())
                    new_bytes += storage.nbytes()
                    self.state.cost.largest = max(self.state.cost.largest, storage.nbytes())
            live = sum(n for _, n in self.state.live.values())
            temporary = _temporary_bytes(func, args)
            if live + temporary > self.state.peak:
                self.state.peak = live + temporary
                if self.state.watched:
                    self.state.watched_gone_at_peak = self.watched_gone()
            self.state.cost.largest = max(self.state.cost.largest, temporary)
            self.state.cost.ops += 1
            if new_bytes or func._schema.is_mutable:  # views move no bytes; in-place and out= ops do
                flops = _flops(func, args, kwargs, out, flop_registry)
                nbytes = new_bytes + sum(t.nbytes for t in ins)
                seconds = roofline.seconds(flops, nbytes)
                c = self.state.cost
                c.flops += flops
                c.seconds += seconds
                if func in save_ops():
                    c.saved_flops += flops
                    c.saved_seconds += seconds
            return out

    return LiveBytes()


def _run_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)``, except addmm with an fp32 out_dtype into ``out=`` on fake
    tensors: torch 2.11's fake kernel for it fails (its decomposition takes the dtype for
    beta), and the op's whole effect on a fake run is its ``out=`` tensor, already shaped."""
    target = kwargs.get("out")
    if target is not None and func._overloadname == "dtype_out" and func._schema.name == "aten::addmm":
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(target, FakeTensor):
            return target
    return func(*args, **kwargs)


def _temporary_bytes(func: Any, args: tuple[Any, ...]) -> int:
    """Scratch an op allocates and frees inside itself, invisible in its outputs.

    logsumexp computes exp(x - max) into a temporary the size of its input (ATen's
    logsumexp_out_impl, on every device): on fp32 logits, as large as the logits.
    """
    if func._schema.name == "aten::logsumexp":
        return int(args[0].nbytes)
    return 0


def _attention_ops() -> tuple[frozenset[str], frozenset[str]]:
    kinds = ("flash_attention", "efficient_attention", "cudnn_attention", "flash_attention_for_cpu")
    fwd = frozenset(f"aten::_scaled_dot_product_{k}" for k in kinds)
    return fwd, frozenset(f"{name}_backward" for name in fwd)


def _flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, registry: dict[Any, Any]) -> float:
    """FLOPs of one op: torch's formulas for matrix products, one formula for every attention kernel.

    Attention: 4*B*Hq*Tq*Tk*D forward (two products, no causal discount, as torch counts)
    and twice that backward, whatever the kernel and however many KV heads.
    """
    import torch

    fwd, bwd = _attention_ops()
    name = func._schema.name
    if name in fwd or name in bwd:
        q, k = (args[0], args[1]) if name in fwd else (args[1], args[2])
        b, h, tq, d = q.shape
        flops = 4 * b * h * tq * k.shape[-2] * d
        return float(flops if name in fwd else 2 * flops)
    if name == "aten::_grouped_mm":
        return _grouped_mm_flops(args[0], args[1], out)
    packet = func._overloadpacket
    if packet not in registry:
        return 0.0
    # the out_dtype overloads (mm.dtype, addmm.dtype) pass a dtype the shape formulas do not take
    args = tuple(a for a in args if not isinstance(a, torch.dtype))
    return float(registry[packet](*args, **kwargs, out_val=out))


def _grouped_mm_flops(a: Any, b: Any, out: Any) -> float:
    """A grouped matrix product (mixture-of-experts layers): every row of ``a`` meets one
    group's matrix, 2*M*K*N in all. Two matrices grouped along K (the weight gradient)
    give one (M, N) product per group over the shared K."""
    if a.dim() == 2 and b.dim() == 2:
        return 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
    return 2.0 * out.numel() * a.shape[-1]


def _device(device: str | None) -> str:
    import torch

    if device:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def _autocast(device: str) -> Any:
    import torch

    return torch.autocast(device, dtype=torch.bfloat16)


def _param_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def _measure_block(block: nn.Module, choice: Choice, x_shape: tuple[int, ...], args: tuple[Any, ...], device: str, roofline: Roofline) -> tuple[BlockCost, _OpCost, _OpCost]:
    """Forward and backward of one wrapped block called as ``block(x, *args)`` with an fp32
    residual stream ``x`` of ``x_shape`` under bf16 autocast; returns its cost and the
    forward and backward op costs (``anymodel.measure_block``, which any model's blocks share)."""
    import torch

    from trainstack.memplan.anymodel import BlockCall, measure_block
    from trainstack.memplan.optim import PRECISIONS

    x = torch.empty(x_shape, device=device)  # made outside the tracker: only its shape counts
    call = BlockCall(args=(x, *args), kwargs={}, hidden=0, output=None)
    return measure_block(block, choice, call, device, PRECISIONS["autocast-bf16"], roofline)


@dataclass(frozen=True)
class _Built:
    model: Any  # the model without its blocks
    block: Any
    args: tuple[Any, ...]


def _build(cfg: ModelConfig, seq: int, device: str) -> _Built:
    from dataclasses import replace as dc_replace

    import torch
    from torch import nn

    from trainstack.nn.decoder import Block, Transformer

    with torch.device(device):
        model = Transformer(dc_replace(cfg, n_layers=1))
        model.layers = nn.ModuleList()
        block = Block(cfg)
    return _Built(model=model, block=block, args=(model.rope_cos[:seq], model.rope_sin[:seq]))


def _measure_head(model: nn.Module, batch: int, seq: int, vocab: int, device: str, roofline: Roofline) -> tuple[HeadCost, _OpCost]:
    """Embedding, final norm and loss: forward and backward with no blocks in between."""
    import torch

    marks: dict[str, int] = {}
    mode = _tracker(roofline)

    def at_blocks(grad: torch.Tensor) -> None:
        # the gradient has reached the hidden states: what the blocks' backward starts from
        marks["bwd_peak"] = mode.state.peak
        marks["after_bwd"] = mode.live_with(grad)
        mode.reset_peak()

    def hook(_module: nn.Module, _inputs: Any, out: torch.Tensor) -> None:
        out.register_hook(at_blocks)

    handle = model.tok_embeddings.register_forward_hook(hook)
    try:
        with mode:
            tokens = torch.randint(0, vocab, (batch, seq), device=device)
            targets = torch.randint(0, vocab, (batch, seq), device=device)
            with _autocast(device):
                loss = model(tokens, targets)
            fwd_peak = mode.state.peak
            mode.reset_peak()
            loss.backward()
            embed_bwd_peak = mode.state.peak
            cost = mode.state.cost
    finally:
        handle.remove()
        for p in model.parameters():
            p.grad = None
    head = HeadCost(fwd_peak=fwd_peak, bwd_peak=marks["bwd_peak"], after_bwd=marks["after_bwd"], embed_bwd_peak=embed_bwd_peak)
    return head, cost


def calibrate(cfg: ModelConfig, *, batch: int, seq: int, device: str | None = None, roofline: Roofline = Roofline(), label: str = "") -> Profile:
    """Profile ``cfg`` at (batch, seq) under bf16 autocast with fp32 weights and AdamW.

    Runs on fake tensors of ``device`` (default: cuda when present, else cpu), so it takes
    seconds and no memory whatever the model size.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    dev = _device(device)
    with FakeTensorMode():
        built = _build(cfg, seq, dev)
        x_shape = (batch, seq, cfg.dim)
        options: dict[Choice, BlockCost] = {}
        largest = 0
        for choice in (Choice.KEEP, Choice.SELECTIVE, Choice.FULL):
            cost, fwd, bwd = _measure_block(built.block, choice, x_shape, built.args, dev, roofline)
            options[choice] = cost
            largest = max(largest, fwd.largest, bwd.largest)
            if choice is Choice.KEEP:
                keep_fwd, keep_bwd = fwd, bwd
        head, head_cost = _measure_head(built.model, batch, seq, cfg.vocab_size, dev, roofline)
        block_params = _param_bytes(built.block)
        other_params = _param_bytes(built.model)
        buffers = sum(b.untyped_storage().nbytes() for b in built.model.buffers())
    # full recompute repeats the whole forward; selective repeats all but the matmuls and attention
    options[Choice.FULL] = replace(
        options[Choice.FULL],
        recompute_flops=keep_fwd.flops,
        recompute_seconds=keep_fwd.seconds,
        host_seconds=keep_fwd.ops * roofline.full_op_s,
    )
    options[Choice.SELECTIVE] = replace(
        options[Choice.SELECTIVE],
        recompute_flops=keep_fwd.flops - keep_fwd.saved_flops,
        recompute_seconds=keep_fwd.seconds - keep_fwd.saved_seconds,
        host_seconds=keep_fwd.ops * roofline.selective_op_s,
    )
    n = cfg.n_layers
    return Profile(
        n_blocks=n,
        block_param_bytes=block_params,
        other_param_bytes=other_params,
        buffer_bytes=buffers,
        options=options,
        head=head,
        step_flops=n * (keep_fwd.flops + keep_bwd.flops) + head_cost.flops,
        step_seconds=n * (keep_fwd.seconds + keep_bwd.seconds) + head_cost.seconds,
        step_host_seconds=(n * (keep_fwd.ops + keep_bwd.ops) + head_cost.ops) * roofline.host_op_s,
        head_seconds=head_cost.seconds,
        largest_allocation=max(largest, head_cost.largest),
        batch=batch,
        seq=seq,
        label=label,
    )


def time_block(
    cfg: ModelConfig, *, batch: int, seq: int, device: str, steps: int = 5, compiled: bool = False, blocks: dict[Any, Any] | None = None
) -> dict[Any, float]:
    """Median seconds of one real block's forward + backward on ``device``, per choice.

    The short real step of calibration: it sees what a roofline cannot (kernels below peak,
    the host's dispatch cost, selective recompute's per-op policy). ``blocks``: those of
    ``real_blocks``, to share them (and their compilation) with ``block_memory``.
    """
    import statistics
    import time

    import torch

    from trainstack.nn.decoder import rope_tables

    dev = torch.device(device)
    with dev:
        cos, sin = (t[:seq] for t in rope_tables(cfg))
    owned = blocks is None
    blocks = real_blocks(cfg, device=device, compiled=compiled) if blocks is None else blocks
    x = torch.randn(batch, seq, cfg.dim, device=dev, requires_grad=True)
    gy = torch.randn_like(x)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def timed(choice: Choice) -> float:
        sync()
        start = time.perf_counter()
        with _autocast(dev.type):
            y = blocks[choice](x, cos, sin)
        y.backward(gy)
        sync()
        blocks[choice].zero_grad(set_to_none=True)
        x.grad = None
        return time.perf_counter() - start

    for choice in tuple(blocks) * 2:  # warm-up: compilation, kernel selection, allocator, caches
        timed(choice)
    # round robin, so drift in clocks or load falls on every choice alike
    times: dict[Any, list[float]] = {c: [] for c in blocks}
    for _ in range(steps):
        for choice in blocks:
            times[choice].append(timed(choice))
    if owned:
        del blocks
        reset_compiler(compiled)
    return {c: statistics.median(t) for c, t in times.items()}


def block_memory(
    cfg: ModelConfig, *, batch: int, seq: int, device: str = "cuda", compiled: bool = False, blocks: dict[Any, Any] | None = None
) -> dict[Any, BlockCost]:
    """One real block's bytes per choice, from the CUDA caching allocator's counters: the
    same quantities ``_measure_block`` takes from fake tensors.

    The real step sees what fake tensors cannot: under a Python dispatch mode some ops take
    their composite form, which saves more than the device's fused kernel does (RMSNorm on
    CUDA saves its input and the reciprocal RMS, its composite form also the normalised
    fp32 output). ``compiled``: the wrapped block under torch.compile, as a compiled run
    would use it (the compiler fuses ops and saves less). Each choice runs twice; the
    second is measured, after compilation, cuBLAS workspaces and kernel choices exist.
    ``blocks``: those of ``real_blocks``, as for ``time_block``.
    """
    import torch

    from trainstack.nn.decoder import rope_tables

    dev = torch.device(device)
    with dev:
        cos, sin = (t[:seq] for t in rope_tables(cfg))
    allocated, peak = torch.cuda.memory_allocated, torch.cuda.max_memory_allocated

    def once(block: Any) -> BlockCost:
        torch.cuda.synchronize(dev)
        base = allocated(dev)
        x = torch.randn(batch, seq, cfg.dim, device=dev, requires_grad=True)  # the residual stream stays fp32
        torch.cuda.reset_peak_memory_stats(dev)
        with _autocast(dev.type):
            y = block(x, cos, sin)
            held = allocated(dev) - base - y.untyped_storage().nbytes()
        saved = allocated(dev) - base - y.untyped_storage().nbytes()
        fwd_peak = peak(dev) - base
        gy = torch.randn_like(y)
        before = allocated(dev) - base
        torch.cuda.reset_peak_memory_stats(dev)
        y.backward(gy)
        bwd_peak = peak(dev) - base - before + saved
        block.zero_grad(set_to_none=True)
        return BlockCost(saved=saved, held=held, fwd_peak=fwd_peak, bwd_peak=bwd_peak)

    owned = blocks is None
    blocks = real_blocks(cfg, device=device, compiled=compiled) if blocks is None else blocks
    costs = {}
    for choice, block in blocks.items():
        once(block)
        costs[choice] = once(block)
    if owned:
        del blocks
        reset_compiler(compiled)
    return costs


def real_blocks(cfg: ModelConfig, *, device: str, compiled: bool = False, keep_budgets: tuple[float, ...] = ()) -> dict[Any, Any]:
    """One fresh block per choice, wrapped for it and compiled if asked: what ``block_memory``
    and ``time_block`` run, keyed by choice. ``keep_budgets``: also a kept block compiled
    under each of these activation memory budgets, keyed by the budget. ``reset_compiler``
    drops the compiled code once they are done."""
    import torch

    from trainstack.nn.decoder import Block

    blocks: dict[Any, Any] = {}
    for choice in (Choice.KEEP, Choice.SELECTIVE, Choice.FULL):
        with torch.device(device):
            block = wrap(Block(cfg), choice)
        blocks[choice] = compile_block(block) if compiled else block
    for budget in keep_budgets:
        with torch.device(device):
            blocks[budget] = compile_block(Block(cfg), budget)
    return blocks


def reset_compiler(compiled: bool) -> None:
    if compiled:
        import torch._dynamo

        torch._dynamo.reset()


def block_op_counts(cfg: ModelConfig, *, batch: int, seq: int, device: str | None = None) -> tuple[int, int]:
    """Ops dispatched by one kept block's forward and its backward: the unit of host cost."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    dev = _device(device)
    with FakeTensorMode():
        built = _build(cfg, seq, dev)
        _, fwd, bwd = _measure_block(built.block, Choice.KEEP, (batch, seq, cfg.dim), built.args, dev, Roofline())
    return fwd.ops, bwd.ops


def fake_step_peak(cfg: ModelConfig, choices: tuple[Choice, ...], *, batch: int, seq: int, device: str | None = None) -> int:
    """Peak live bytes of a whole second training step of ``cfg`` under ``choices``, on fake tensors.

    The reference the memory model is checked against: the real model, the real step
    (bf16 autocast, AdamW, zero_grad to None), nothing composed.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainstack.nn.decoder import Transformer
    from trainstack.memplan.wrappers import apply_choices

    dev = _device(device)
    mode = _tracker(Roofline())
    with FakeTensorMode(), mode:
        with torch.device(dev):
            model = apply_choices(Transformer(cfg), choices)
        opt = torch.optim.AdamW(model.parameters(), foreach=False)
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), device=dev)
        for step in range(2):
            if step == 1:
                mode.reset_peak()
            with _autocast(dev):
                loss = model(tokens[:, :-1], tokens[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
        return mode.state.peak

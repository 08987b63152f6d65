"""The live-bytes tracker: a dispatch mode that follows every storage an op creates.

Under ``FakeTensorMode`` nothing is allocated or computed, yet every op runs with its real
shapes, dtypes, autocast casts and attention kernel choice. ``tracker`` follows each
storage an op creates until it is freed, which gives the bytes live at any point (what a
block saves is what is still alive after its forward), the peaks of forward and backward,
and per-op FLOPs and bytes, turned into times by a ``Roofline``, for the recompute cost.
Calibration (``calibration``) and the references (``reference``) measure with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainstack.memplan.wrappers import save_ops


@dataclass(frozen=True)
class Roofline:
    """Rates that turn FLOPs, bytes and op counts into estimated times, to rank plans.

    GPU: ``flops_per_s`` (bf16 matmul) and ``bytes_per_s`` (device copy, read + write).
    Host: ``host_op_s`` per op issued in eager mode; ``full_op_s`` and ``selective_op_s``
    added per op of a block's forward when the block is fully or selectively recomputed
    (selective runs every op through a Python dispatch mode, twice). Defaults: as
    benchmarks/memplan_h200.py measured them on an H200, torch 2.11 (commit b74b7db's run;
    git history of benchmarks/results/). Where a GPU is at hand, ``realblock.measure_real``
    replaces these estimates by measured block times.
    """

    flops_per_s: float = 7.84e14
    bytes_per_s: float = 4.13e12
    host_op_s: float = 6.07e-6
    full_op_s: float = 14.14e-6
    selective_op_s: float = 36.22e-6

    def seconds(self, flops: float, nbytes: int) -> float:
        return max(flops / self.flops_per_s, nbytes / self.bytes_per_s)


def dispatch_mode_base() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


@dataclass
class OpCost:
    ops: int = 0  # ops dispatched
    flops: float = 0.0
    seconds: float = 0.0
    saved_flops: float = 0.0  # the part selective recompute keeps (matmuls, attention)
    saved_seconds: float = 0.0
    largest: int = 0  # the largest single allocation, temporaries included


@dataclass
class TrackerState:
    live: dict[int, tuple[Any, int]] = field(default_factory=dict)  # storage id -> (weak ref, bytes)
    peak: int = 0
    cost: OpCost = field(default_factory=OpCost)
    # storages to follow (storage id -> (weak ref, bytes)), and how many of their bytes had
    # been freed when the peak was reached
    watched: dict[int, tuple[Any, int]] = field(default_factory=dict)
    watched_gone_at_peak: int = 0


def tracker(roofline: Roofline) -> Any:
    """A dispatch mode that follows storages created under it, and counts FLOPs and bytes."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    class LiveBytes(dispatch_mode_base()):  # type: ignore[misc]  # the base is torch's dispatch mode of the installed version, chosen at run time
        def __init__(self) -> None:
            super().__init__()
            self.state = TrackerState()

        @property
        def live(self) -> int:
            self.prune()
            return sum(n for _, n in self.state.live.values())

        def live_with(self, tensor: Any) -> int:
            """Bytes live, ``tensor``'s storage among them (once: made under this mode, it is
            counted already)."""
            self.prune()
            ref = StorageWeakRef(tensor.untyped_storage())
            return self.live + (0 if ref.cdata in self.state.live else tensor.untyped_storage().nbytes())

        def bytes_of(self, storages: set[int]) -> int:
            """Bytes live in ``storages`` (storage ids, as ``StorageWeakRef(...).cdata``)."""
            self.prune()
            return sum(n for k, (_, n) in self.state.live.items() if k in storages)

        def watch(self, storages: set[int]) -> None:
            """Follow the live ones of ``storages``: ``watched_gone`` counts their bytes freed
            since, and the peak records how many were gone when it was reached."""
            self.prune()
            self.state.watched.update((k, v) for k, v in self.state.live.items() if k in storages)

        def watched_gone(self) -> int:
            return sum(n for ref, n in self.state.watched.values() if ref.expired())

        def reset_peak(self) -> None:
            self.state.peak = self.live
            self.state.watched_gone_at_peak = self.watched_gone()

        def reset_cost(self) -> None:
            self.state.cost = OpCost()

        def prune(self) -> None:
            """Forget the storages freed since the last op."""
            dead = [k for k, (ref, _) in self.state.live.items() if ref.expired()]
            for k in dead:
                del self.state.live[k]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = run_op(func, args, kwargs)
            ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            in_ids = {StorageWeakRef(t.untyped_storage()).cdata for t in ins}
            self.prune()
            new_bytes = 0
            for t in outs:
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                if ref.cdata not in in_ids and ref.cdata not in self.state.live:
                    self.state.live[ref.cdata] = (ref, storage.nbytes())
                    new_bytes += storage.nbytes()
                    self.state.cost.largest = max(self.state.cost.largest, storage.nbytes())
            live = sum(n for _, n in self.state.live.values())
            temporary = temporary_bytes(func, args)
            if live + temporary > self.state.peak:
                self.state.peak = live + temporary
                if self.state.watched:
                    self.state.watched_gone_at_peak = self.watched_gone()
            self.state.cost.largest = max(self.state.cost.largest, temporary)
            self.state.cost.ops += 1
            if new_bytes or func._schema.is_mutable:  # views move no bytes; in-place and out= ops do
                flops = op_flops(func, args, kwargs, out, flop_registry)
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


def run_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)``, except addmm with an fp32 out_dtype into ``out=`` on fake
    tensors: torch 2.11's fake kernel for it fails (its decomposition takes the dtype for
    beta), and the op's whole effect on a fake run is its ``out=`` tensor, already shaped."""
    target = kwargs.get("out")
    if target is not None and func._overloadname == "dtype_out" and func._schema.name == "aten::addmm":
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(target, FakeTensor):
            return target
    return func(*args, **kwargs)


def temporary_bytes(func: Any, args: tuple[Any, ...]) -> int:
    """Scratch an op allocates and frees inside itself, invisible in its outputs.

    logsumexp computes exp(x - max) into a temporary the size of its input (ATen's
    logsumexp_out_impl, on every device): on fp32 logits, as large as the logits.
    """
    if func._schema.name == "aten::logsumexp":
        return int(args[0].nbytes)
    return 0


def attention_ops() -> tuple[frozenset[str], frozenset[str]]:
    kinds = ("flash_attention", "efficient_attention", "cudnn_attention", "flash_attention_for_cpu")
    fwd = frozenset(f"aten::_scaled_dot_product_{k}" for k in kinds)
    return fwd, frozenset(f"{name}_backward" for name in fwd)


def op_flops(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, registry: dict[Any, Any]) -> float:
    """FLOPs of one op: torch's formulas for matrix products, one formula for every attention kernel.

    Attention: 4*B*Hq*Tq*Tk*D forward (two products, no causal discount, as torch counts)
    and twice that backward, whatever the kernel and however many KV heads.
    """
    import torch

    fwd, bwd = attention_ops()
    name = func._schema.name
    if name in fwd or name in bwd:
        q, k = (args[0], args[1]) if name in fwd else (args[1], args[2])
        b, h, tq, d = q.shape
        flops = 4 * b * h * tq * k.shape[-2] * d
        return float(flops if name in fwd else 2 * flops)
    if name == "aten::_grouped_mm":
        return grouped_mm_flops(args[0], args[1], out)
    packet = func._overloadpacket
    if packet not in registry:
        return 0.0
    # the out_dtype overloads (mm.dtype, addmm.dtype) pass a dtype the shape formulas do not take
    args = tuple(a for a in args if not isinstance(a, torch.dtype))
    return float(registry[packet](*args, **kwargs, out_val=out))


def grouped_mm_flops(a: Any, b: Any, out: Any) -> float:
    """A grouped matrix product (mixture-of-experts layers): every row of ``a`` meets one
    group's matrix, 2*M*K*N in all. Two matrices grouped along K (the weight gradient)
    give one (M, N) product per group over the shared K."""
    if a.dim() == 2 and b.dim() == 2:
        return 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
    return 2.0 * out.numel() * a.shape[-1]

"""Where a profiled step spends its time: device kernels (or, on a CPU, the CPU ops' own time)
grouped by kind and by class.

``breakdown`` takes the kernels of a profile (name, start, duration, and the phase of the
step that launched it) and sums their time per kind (float8 and 16-bit matrix products,
attention, compiler-fused kernels, copies), with the time the device sat idle between
them; ``text`` prints it as a table. The kinds are recognised by kernel name (cuBLAS,
CUTLASS, cuDNN, flash attention, Triton's names), as data in ``KINDS``: a kernel no pattern
matches is "other", listed by name.

The classes (``CLASSES``) are what a bench row reports: GEMMs, attention forward and
backward, norm / elementwise, the optimizer, recompute, communication, other, and idle.
A kernel's class comes from its kind and its phase (forward, backward, recompute,
optimizer: ``PHASES``, read from the profiler's ranges around it); a kernel recorded
without one is placed by its name alone. Each instant of the step is counted once: time
where kernels overlap is split evenly among them, so the classes and idle sum to the step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# (kind, pattern on the kernel's name); the first match wins
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.I))
    for kind, pattern in (
        ("attention", r"fmha|flash|attention|cudnn|sdpa"),
        # cuBLAS's nvjet kernels name float8 operands with a q (qqtst, qrtst; 16-bit: tst, tss)
        ("matmul fp8", r"nvjet_sm\d+_q|(gemm|xmma|cutlass|scaled_mm).*(e4m3|e5m2|f8|fp8)|(e4m3|e5m2).*(gemm|xmma|cutlass)"),
        ("matmul 16-bit", r"gemm|xmma|cutlass|nvjet|cublas|_mma|splitk"),
        # inductor's kernels that reduce a tensor to its float8 scale (abs, max) or cast for _scaled_mm
        ("float8 scales, casts", r"^triton_.*(_scaled_mm|abs_(\w+_)?max|amax)"),
        ("compiled (triton)", r"^triton_"),
        ("optimizer", r"adam|foreach|multi_tensor"),
        ("copy / fill", r"memcpy|memset|copy|fill|cat_|CatArray"),
        ("elementwise (eager)", r"elementwise|vectorized|unrolled|reduce_kernel"),
    )
)
OTHER = "other"

# The classes of a step's time, in the order reports show them; IDLE is time no kernel ran.
GEMM, ATTN_FWD, ATTN_BWD, ELEMENTWISE, OPTIMIZER = "GEMM", "attention forward", "attention backward", "norm / elementwise", "optimizer"
RECOMPUTE, COMM, IDLE = "recompute", "communication", "idle"
# copies between the host's memory and the GPU's (offloaded state going up and down)
H2D, D2H = "copy host to device", "copy device to host"
CLASSES = (GEMM, ATTN_FWD, ATTN_BWD, ELEMENTWISE, OPTIMIZER, RECOMPUTE, COMM, H2D, D2H, OTHER)
PHASES = ("forward", "backward", "recompute", "optimizer")

_COMM = re.compile(r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|c10d::|broadcast", re.I)
# the CUDA runtime's copies across the bus (a trace names them "Memcpy HtoD (Pinned -> Device)")
_H2D = re.compile(r"memcpy\s*htod", re.I)
_D2H = re.compile(r"memcpy\s*dtoh", re.I)
# cuDNN's and flash attention's backward kernels (dO.O, dQ's conversion, the KV heads' reduction of dK, dV)
_BACKWARD = re.compile(r"bprop|bwd|backward|dot_do_o|convert_dq|reduce_head|dkdv|dq_dk", re.I)
# the optimizer's kernels: fused or foreach AdamW, and a compiled AdamW update (the only lerp of a step)
_OPTIMIZER = re.compile(r"adam|foreach|multi_tensor|_lerp_|lerp_", re.I)
# memory-bound kernels eager PyTorch names for what they do
_MEMORY = re.compile(r"norm|GammaBeta|embedding|gather|scatter|index|sort|softmax|nll|cross_entropy|unique", re.I)
# a CPU's leaf ops (aten::name): the matrix products
_CPU_GEMM = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|mv|addmv|dot|linear|matmul|_scaled_mm|_grouped_mm|_int_mm)$")


@dataclass(frozen=True)
class Kernel:
    name: str
    start_us: float
    duration_us: float
    phase: str = ""  # one of PHASES; "" where the profile did not say


@dataclass
class Breakdown:
    steps: int
    wall_us: float  # first kernel's start to last kernel's end
    busy_us: float  # union of kernel intervals
    per_kind: dict[str, float] = field(default_factory=dict)  # kind -> summed kernel time (us)
    top: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # kind -> largest kernels (name, us)
    per_class: dict[str, float] = field(default_factory=dict)  # class -> its share of the busy time (us), overlaps split
    class_kernel_us: dict[str, float] = field(default_factory=dict)  # class -> summed kernel time (us)
    class_count: dict[str, int] = field(default_factory=dict)  # class -> kernels (CPU op spans) recorded
    source: str = "device kernels"  # or "CPU ops"

    @property
    def idle_us(self) -> float:
        return max(self.wall_us - self.busy_us, 0.0)

    def to_json(self) -> dict:
        per_step = 1e3 * self.steps
        wall = self.wall_us or 1.0
        classes = {
            name: {
                "ms_per_step": us / per_step,
                "share": us / wall,
                "kernel_ms_per_step": self.class_kernel_us.get(name, 0.0) / per_step,
                "kernels_per_step": self.class_count.get(name, 0) / max(self.steps, 1),
            }
            for name, us in self.per_class.items()
        }
        return {
            "steps": self.steps,
            "source": self.source,
            "wall_ms_per_step": self.wall_us / per_step,
            "idle_ms_per_step": self.idle_us / per_step,
            "idle_share": self.idle_us / wall if self.wall_us else 0.0,
            "ms_per_step": {k: v / per_step for k, v in self.per_kind.items()},
            "classes": classes,
        }


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return OTHER


def class_of(name: str, phase: str = "", *, cpu: bool = False) -> str:
    """The class of a kernel (or, with ``cpu``, of a CPU leaf op such as ``aten::mm``) launched
    in ``phase`` (one of PHASES, or "" when unknown: the name alone decides)."""
    if _COMM.search(name):
        return COMM
    if _H2D.search(name):
        return H2D
    if _D2H.search(name):
        return D2H
    if phase == "recompute":
        return RECOMPUTE
    if phase == "optimizer" or (not phase and _OPTIMIZER.search(name)):
        return OPTIMIZER
    kind = kind_of(name)
    if kind == "attention":
        backward = phase == "backward" if phase else bool(_BACKWARD.search(name))
        return ATTN_BWD if backward else ATTN_FWD
    if kind.startswith("matmul") or (cpu and _CPU_GEMM.match(name)):
        return GEMM
    if kind == "optimizer":
        return OPTIMIZER
    if cpu or kind != OTHER or _MEMORY.search(name):
        return ELEMENTWISE
    return OTHER


def _split_overlaps(ks: list[Kernel], classes: list[str]) -> dict[str, float]:
    """Each covered instant once: where kernels overlap, the time is split evenly among them."""
    edges = sorted(
        [(k.start_us, 1, c) for k, c in zip(ks, classes)] + [(k.start_us + k.duration_us, -1, c) for k, c in zip(ks, classes)],
        key=lambda e: (e[0], e[1]),
    )
    active: dict[str, int] = {}
    running, last = 0, 0.0
    out: dict[str, float] = {}
    for t, delta, c in edges:
        if running and t > last:
            for name, count in active.items():
                if count:
                    out[name] = out.get(name, 0.0) + (t - last) * count / running
        last = t
        active[c] = active.get(c, 0) + delta
        running += delta
    return out


def breakdown(kernels: Iterable[Kernel], steps: int, top: int = 3, *, wall_us: float | None = None, cpu: bool = False) -> Breakdown:
    """Time per kind and per class over ``steps`` profiled steps; ``top`` largest kernel names
    per kind. ``wall_us``: the steps' own time (on a CPU, the steps' ranges), else the span
    from the first kernel's start to the last one's end. ``cpu``: the kernels are CPU ops."""
    ks = sorted(kernels, key=lambda k: k.start_us)
    source = "CPU ops" if cpu else "device kernels"
    if not ks:
        return Breakdown(steps, wall_us or 0.0, 0.0, source=source)
    per_kind: dict[str, float] = {}
    per_name: dict[str, dict[str, float]] = {}
    busy, end = 0.0, float("-inf")
    for k in ks:
        kind = kind_of(k.name)
        per_kind[kind] = per_kind.get(kind, 0.0) + k.duration_us
        names = per_name.setdefault(kind, {})
        names[k.name] = names.get(k.name, 0.0) + k.duration_us
        stop = k.start_us + k.duration_us
        busy += max(0.0, stop - max(k.start_us, end))
        end = max(end, stop)
    wall = max(wall_us, busy) if wall_us is not None else end - ks[0].start_us
    ordered = dict(sorted(per_kind.items(), key=lambda kv: -kv[1]))
    largest = {kind: sorted(names.items(), key=lambda kv: -kv[1])[:top] for kind, names in per_name.items()}
    classes = [class_of(k.name, k.phase, cpu=cpu) for k in ks]
    summed: dict[str, float] = {}
    counts: dict[str, int] = {}
    for k, c in zip(ks, classes):
        summed[c] = summed.get(c, 0.0) + k.duration_us
        counts[c] = counts.get(c, 0) + 1
    split = _split_overlaps(ks, classes)
    per_class = {c: split.get(c, 0.0) for c in CLASSES if c in summed}
    return Breakdown(
        steps, wall, busy, ordered, largest, per_class, {c: summed[c] for c in per_class}, {c: counts[c] for c in per_class}, source
    )


def text(b: Breakdown) -> str:
    """The breakdown as a table, milliseconds per step and share of the wall time."""
    if not b.wall_us:
        return "no device kernels were recorded\n"
    per = 1e3 * b.steps
    lines = [
        f"{b.steps} steps, {b.wall_us / per:.2f} ms per step on the device, idle {b.idle_us / per:.2f} ms ({b.idle_us / b.wall_us:.1%})",
        "",
    ]
    lines.append(f"{'kind':22s} {'ms/step':>9s} {'share':>7s}  largest kernels")
    for kind, us in b.per_kind.items():
        names = "; ".join(f"{_short(n)} {t / per:.2f}" for n, t in b.top.get(kind, []))
        lines.append(f"{kind:22s} {us / per:9.2f} {us / b.wall_us:7.1%}  {names}")
    return "\n".join(lines) + "\n"


def class_text(b: Breakdown) -> str:
    """The classes as a table: milliseconds per step and share of the step, idle last."""
    if not b.wall_us:
        return f"no {b.source} were recorded\n"
    per = 1e3 * b.steps
    lines = [f"{'class':22s} {'ms/step':>9s} {'share':>7s}  ({b.source})"]
    for name, us in b.per_class.items():
        lines.append(f"{name:22s} {us / per:9.2f} {us / b.wall_us:7.1%}")
    lines.append(f"{IDLE:22s} {b.idle_us / per:9.2f} {b.idle_us / b.wall_us:7.1%}")
    return "\n".join(lines) + "\n"


def class_cell(c: dict | None) -> str:
    """'41.2% 512 TFLOP/s (67%)', '3.1% 2.9 TB/s (68%)' or '8.0%'."""
    if not isinstance(c, dict) or not isinstance(c.get("share"), (int, float)):
        return "-"
    text = f"{c['share']:.1%}"
    if isinstance(c.get("tflops"), (int, float)):
        text += f" {c['tflops']:,.0f} TFLOP/s" if c["tflops"] >= 1 else f" {c['tflops'] * 1e3:,.1f} GFLOP/s"
    elif isinstance(c.get("gbps"), (int, float)):
        text += f" {c['gbps'] / 1e3:,.2f} TB/s" if c["gbps"] >= 100 else f" {c['gbps']:,.2f} GB/s"
    if isinstance(c.get("of_ceiling"), (int, float)):
        text += f" ({c['of_ceiling']:.0%})"
    return text


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."

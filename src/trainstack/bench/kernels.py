"""Where a profiled GPU step spends its time: device kernels grouped by kind.

``breakdown`` takes the kernels of a profile (name, start, duration) and sums their time
per kind (float8 and 16-bit matrix products, attention, compiler-fused kernels, copies),
with the time the GPU sat idle between them; ``text`` prints it as a table. The kinds are
recognised by kernel name (cuBLAS, CUTLASS, cuDNN, flash attention, Triton's names), as
data in ``KINDS``: a kernel no pattern matches is "other", listed by name.
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


@dataclass(frozen=True)
class Kernel:
    name: str
    start_us: float
    duration_us: float


@dataclass
class Breakdown:
    steps: int
    wall_us: float  # first kernel's start to last kernel's end
    busy_us: float  # union of kernel intervals
    per_kind: dict[str, float] = field(default_factory=dict)  # kind -> summed kernel time (us)
    top: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # kind -> largest kernels (name, us)

    @property
    def idle_us(self) -> float:
        return max(self.wall_us - self.busy_us, 0.0)

    def to_json(self) -> dict:
        per_step = 1e3 * self.steps
        return {
            "steps": self.steps,
            "wall_ms_per_step": self.wall_us / per_step,
            "idle_ms_per_step": self.idle_us / per_step,
            "ms_per_step": {k: v / per_step for k, v in self.per_kind.items()},
        }


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return OTHER


def breakdown(kernels: Iterable[Kernel], steps: int, top: int = 3) -> Breakdown:
    """Time per kind over ``steps`` profiled steps; ``top`` largest kernel names per kind."""
    ks = sorted(kernels, key=lambda k: k.start_us)
    if not ks:
        return Breakdown(steps, 0.0, 0.0)
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
    wall = end - ks[0].start_us
    ordered = dict(sorted(per_kind.items(), key=lambda kv: -kv[1]))
    largest = {kind: sorted(names.items(), key=lambda kv: -kv[1])[:top] for kind, names in per_name.items()}
    return Breakdown(steps, wall, busy, ordered, largest)


def text(b: Breakdown) -> str:
    """The breakdown as a table, milliseconds per step and share of the wall time."""
    if not b.wall_us:
        return "no device kernels were recorded\n"
    per = 1e3 * b.steps
    lines = [f"{b.steps} steps, {b.wall_us / per:.2f} ms per step on the device, idle {b.idle_us / per:.2f} ms ({b.idle_us / b.wall_us:.1%})", ""]
    lines.append(f"{'kind':22s} {'ms/step':>9s} {'share':>7s}  largest kernels")
    for kind, us in b.per_kind.items():
        names = "; ".join(f"{_short(n)} {t / per:.2f}" for n, t in b.top.get(kind, []))
        lines.append(f"{kind:22s} {us / per:9.2f} {us / b.wall_us:7.1%}  {names}")
    return "\n".join(lines) + "\n"


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."

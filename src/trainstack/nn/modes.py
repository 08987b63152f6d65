"""Training modes, the grammar: eager, torch.compile per block, activation checkpointing, memplan.

A mode string joins parts with '+': ``eager``, ``compile``, ``ac-none``, ``ac-full``,
``ac-every-N`` (every N-th block, starting with the first), ``ac-selective`` (per op:
matrix products and attention are saved, cheap element-wise ops recomputed) and
``planned`` (what memplan chooses for the memory budget); e.g. ``compile+ac-selective``.
On one GPU the weights are fp32 under bf16 autocast, unless the mode has the part ``bf16``:
bf16 parameters with fp32 master weights and AdamW state (bench.precision), e.g.
``compile+bf16``. The part ``fp8`` (tensorwise scaling), ``fp8-rowwise`` or ``fp8-fastacc``
(tensorwise, fast accumulation in the backward products too) trains the
linear layers of the blocks in float8 through torchao (bench.fp8: those large enough for
float8 to pay for its casts; the output projection stays bf16), e.g. ``compile+bf16+fp8``.
The part ``flash`` runs the decoder's attention through flash-attn's kernels
(``flash_attn_func``, an installed flash-attn on a CUDA GPU) instead of torch's
scaled_dot_product_attention, e.g. ``compile+bf16+flash``; memplan plans SDPA only, so
``flash`` does not go with ``planned``.

Distributed frameworks (under torchrun, or one process in a group of its own): ``fsdp2``
(FSDP2's ``fully_shard``, what torchrun gets without a part), ``zero1``, ``zero2``, ``zero3``
(DeepSpeed ZeRO stages); ``offload`` moves state to the host and steps the optimizer on the
CPU (FSDP2's CPUOffloadPolicy; with a ZeRO stage, ZeRO-Offload), e.g. ``zero2+offload``.
With ``planned``, memplan also decides whether the framework offloads (where the budget
needs it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainstack.errors import UsageError

FRAMEWORKS = ("fsdp2", "zero1", "zero2", "zero3")
DEFAULT_ABLATION = ("eager", "compile", "compile+bf16", "ac-full", "ac-every-2", "ac-selective", "compile+ac-selective", "planned")

_AC_PART = re.compile(r"^ac-(none|full|selective|every-([1-9][0-9]*))$")
AC_PARTS = ("ac-none", "ac-full", "ac-every-N", "ac-selective", "planned")  # as _AC_PART (and planned) accept them
# fp8 mode part -> torchao float8 recipe (the scaling granularity)
FP8_PARTS = {"fp8": "tensorwise", "fp8-tensorwise": "tensorwise", "fp8-rowwise": "rowwise", "fp8-fastacc": "tensorwise-fastacc"}
FP8_NAMES = {"tensorwise": "fp8", "rowwise": "fp8-rowwise", "tensorwise-fastacc": "fp8-fastacc"}  # recipe -> its part in a mode's name
# every part parse_mode accepts, in the order the help and the errors name them
PROCESS_PARTS = ("eager", "compile", "bf16", *FP8_PARTS, "flash", *AC_PARTS)  # how one process trains
FRAMEWORK_PARTS = (*FRAMEWORKS, "offload")  # how the state is sharded or offloaded
PARTS = PROCESS_PARTS + FRAMEWORK_PARTS
ACCEPTED = f"{', '.join(PARTS)}, or parts joined by '+'"


@dataclass(frozen=True)
class Mode:
    compile: bool = False
    ac: str = "none"  # none | full | every | selective | planned
    every: int = 0
    bf16: bool = False  # bf16 parameters, fp32 master weights and optimizer state
    fp8: str = ""  # "" (off) or a recipe of bench.fp8 (tensorwise, rowwise, tensorwise-fastacc): float8 linear layers
    flash: bool = False  # attention through flash-attn's flash_attn_func instead of SDPA
    framework: str = ""  # "" (FSDP2 under torchrun, none on one process) or one of FRAMEWORKS
    offload: bool = False  # state on the host, the optimizer's step on the CPU

    @property
    def zero_stage(self) -> int:
        """The DeepSpeed ZeRO stage (0: not DeepSpeed)."""
        return int(self.framework[4:]) if self.framework.startswith("zero") else 0

    @property
    def name(self) -> str:
        ac = {"none": "", "every": f"ac-every-{self.every}", "planned": "planned"}.get(self.ac, f"ac-{self.ac}")
        parts = (["compile"] if self.compile else []) + ([ac] if ac else [])
        parts = (parts or ["eager"]) + (["bf16"] if self.bf16 else [])
        parts += [FP8_NAMES[self.fp8]] if self.fp8 else []
        parts += ["flash"] if self.flash else []
        if (self.framework or self.offload) and parts == ["eager"]:
            parts = []  # "zero2", not "zero2+eager"
        parts = ([self.framework] if self.framework else []) + parts + (["offload"] if self.offload else [])
        return "+".join(parts)


def parse_mode(text: str) -> Mode:
    compiled, ac, every, seen_ac, bf16, fp8, flash, framework, offload = False, "none", 0, False, False, "", False, "", False
    for part in text.strip().lower().split("+"):
        if part in FRAMEWORKS:
            if framework:
                raise UsageError(f"--modes: '{text}' names more than one framework; accepted: at most one of {', '.join(FRAMEWORKS)}")
            framework = part
            continue
        if part == "offload":
            offload = True
            continue
        if part in FP8_PARTS:
            if fp8:
                raise UsageError(f"--modes: '{text}' names more than one fp8 part; accepted: at most one of {', '.join(FP8_PARTS)}")
            fp8 = FP8_PARTS[part]
            continue
        match = _AC_PART.match(part)
        if part == "eager":
            continue
        if part == "compile":
            compiled = True
            continue
        if part == "bf16":
            bf16 = True
            continue
        if part == "flash":
            flash = True
            continue
        if part != "planned" and match is None:
            raise UsageError(f"--modes: unknown mode part '{part}' in '{text}'; accepted: {ACCEPTED}")
        if seen_ac:
            raise UsageError(f"--modes: '{text}' names more than one checkpointing choice; accepted: at most one ac-* or planned")
        seen_ac = True
        if part == "planned":
            ac = "planned"
            continue
        assert match is not None  # a part neither planned nor matched was refused above
        if match.group(2):
            ac, every = "every", int(match.group(2))
        else:
            ac = match.group(1)
    if compiled and "eager" in text.lower().split("+"):
        raise UsageError(f"--modes: '{text}' is both eager and compile; accepted: {ACCEPTED}")
    if flash and ac == "planned":
        raise UsageError(
            f"--modes: '{text}' joins flash and planned, but memplan plans SDPA's attention only; accepted: flash with ac-* parts or none"
        )
    if (framework or offload) and (fp8 or flash):
        raise UsageError(
            f"--modes: '{text}' joins a framework or offload with fp8 or flash; accepted: those on one process or FSDP2 under torchrun"
        )
    return Mode(compile=compiled, ac=ac, every=every, bf16=bf16, fp8=fp8, flash=flash, framework=framework, offload=offload)


def parse_modes(text: str) -> list[Mode]:
    modes = [parse_mode(part) for part in text.split(",") if part.strip()]
    if not modes:
        raise UsageError(f"--modes: no mode given; accepted: {ACCEPTED}")
    return modes

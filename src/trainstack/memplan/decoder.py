"""The bench decoder as one more model to plan: its blocks are known (``layers``), so it is
built on the meta device at any size and calibrated by the calibration of any model
(``calibration``), its blocks measured for real by ``realblock`` on a copy of one block.

``plan_memory(cfg, batch=, seq=, budget_bytes=)`` plans a ``ModelConfig`` through
``api.calibrate_any_compiled`` and ``api.choose_plan``, as ``plan`` plans any model; what
it adds is the bench's own precision, ``bf16`` (``stored_as``). torch is imported only
when these are called.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trainstack.memplan.api import COMPILER_BUDGETS, calibrate_any_compiled, choose_plan, cuda_available, measured_profiles
from trainstack.memplan.block_call import record_call
from trainstack.memplan.blocks import find_blocks
from trainstack.memplan.calibration import calibrate_model, measure_block
from trainstack.memplan.costs import Choice, Overheads, Plan, Profile
from trainstack.memplan.fake import fake_copy, fake_like
from trainstack.memplan.model_step import autocast_for, default_loss
from trainstack.memplan.offload import Placement
from trainstack.memplan.optim import OptimizerSpec, PrecisionSpec, optimizer_spec, precision_spec
from trainstack.memplan.realblock import measure_real
from trainstack.memplan.reference import fake_step_peak as whole_step_peak
from trainstack.memplan.tracking import Roofline
from trainstack.memplan.wrappers import reset_compiler

if TYPE_CHECKING:
    from torch import nn

    from trainstack.nn.decoder import ModelConfig

# How the bench trains the decoder when its mode says nothing else: fused AdamW (two fp32
# states a parameter, no temporaries) on fp32 weights under bf16 autocast.
BENCH_OPTIMIZER = OptimizerSpec("AdamW", full_states=2)
BENCH_AUTOCAST = PrecisionSpec("bf16 autocast, fp32 weights", param_itemsize=None)
BLOCKS = "layers"

# The eager master update's temporaries of one parameter (bench.precision.adamw_update): the
# fp32 gradient, the square root, the denominator and the update, each of the parameter's size.
MASTER_UPDATE_TEMPORARIES = 4


def decoder_on_meta(cfg: ModelConfig, *, batch: int, seq: int) -> tuple[nn.Module, tuple[Any, Any]]:
    """The decoder of ``cfg`` and a (tokens, targets) batch, on the meta device: shapes and
    dtypes without memory, whatever the size, for calibration on fake tensors."""
    import torch

    from trainstack.nn.decoder import Transformer

    with torch.device("meta"):
        model = Transformer(cfg)
        tokens = torch.zeros(batch, seq, dtype=torch.long)
    return model, (tokens, tokens)


def one_block(cfg: ModelConfig, *, batch: int, seq: int, device: Any, dtype: Any = None) -> tuple[nn.Module, Any]:
    """What the decoder's blocks see, real on ``device``: a module holding one block, called
    as the decoder calls its blocks (the residual stream and the rotary tables), and that
    residual stream: what ``realblock.measure_real`` measures for the decoder. ``dtype``:
    the parameters' and the residual stream's (bf16 for the bench's ``bf16`` modes; default
    fp32), the rotary tables staying fp32 buffers as a cast of the parameters leaves them."""
    import torch
    from torch import nn

    from trainstack.nn.decoder import Block, rope_tables

    class OneBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Block(cfg)])
            cos, sin = (t[:seq] for t in rope_tables(cfg))
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x, self.rope_cos, self.rope_sin)
            return x

    with torch.device(device):
        block, x = OneBlock(), torch.randn(batch, seq, cfg.dim)
    if dtype is not None:
        for p in block.parameters():
            p.data = p.data.to(dtype)
        x = x.to(dtype)
    return block, x


def calibrate(
    cfg: ModelConfig, *, batch: int, seq: int, device: str | None = None, roofline: Roofline = Roofline(), label: str = ""
) -> Profile:
    """Profile ``cfg`` at (batch, seq) under bf16 autocast with fp32 weights and AdamW, on
    fake tensors of ``device`` (default: cuda when present, else cpu): seconds and no memory
    whatever the model size."""
    model, tokens = decoder_on_meta(cfg, batch=batch, seq=seq)
    return calibrate_model(
        model,
        tokens,
        run=find_blocks(model, BLOCKS),
        optimizer=BENCH_OPTIMIZER,
        precision=BENCH_AUTOCAST,
        device=_device(device),
        loss_fn=default_loss,
        roofline=roofline,
        label=label,
    )


def plan_memory(
    cfg: ModelConfig,
    *,
    batch: int,
    seq: int,
    budget_bytes: int,
    world_size: int = 1,
    overheads: Overheads | None = None,
    device: str | None = None,
    time_blocks: bool | None = None,
    compiled: bool = False,
    precision: str = "autocast-bf16",
    placement: Placement | None = None,
    optimizer: str | OptimizerSpec = BENCH_OPTIMIZER,
) -> Plan:
    """The plan of least recompute cost whose predicted peak fits ``budget_bytes``.

    Memory comes from fake-tensor calibration, the blocks' bytes from one real block per
    choice on a CUDA GPU. Recompute costs come from timing one real block per choice when
    ``time_blocks`` (default: when a CUDA GPU is present), else from a roofline with H200
    rates. ``compiled``: the blocks will run under torch.compile, so on a GPU they are
    measured compiled, and the kept blocks also under each of ``COMPILER_BUDGETS`` (the
    compiler's activation memory budget); the plan names the budget it chose. Raises
    BudgetError (how much is missing, and the batch or sharding that would fit).

    ``precision``: how the bench trains the blocks' weights, a name of
    ``memplan.optim.PRECISIONS``. ``autocast-bf16`` is calibrated under bf16 autocast (fp32
    weights, an fp32 residual stream); ``bf16`` (bf16 parameters, gradients and activations,
    AdamW on fp32 master copies, no autocast, as bench's ``bf16`` modes) on bf16 parameters,
    its real block too, with the master update's temporaries when it runs eagerly; ``fp32``
    (fp32 weights, no autocast, as the bench trains on a CPU) without autocast.

    ``optimizer``: a name of ``memplan.optim.OPTIMIZERS`` or a spec (default: fused AdamW,
    as the bench steps on a GPU; ``adamw-forloop`` as it steps on a CPU).
    """
    spec = precision_spec(precision)
    calibrated_as = spec if not spec.autocast else BENCH_AUTOCAST
    block_dtype = _dtype_of(spec)
    optimizer = optimizer_spec(optimizer)
    on_gpu = cuda_available()
    measure = (compiled and on_gpu) or bool(time_blocks) or (time_blocks is None and on_gpu)

    def profiles_at(rows: int, measured: bool) -> dict[float, Profile]:
        model, tokens = decoder_on_meta(cfg, batch=rows, seq=seq)
        real = _one_block_or_none(cfg, batch=rows, seq=seq, dtype=block_dtype) if measured else None
        found = calibrate_any_compiled(
            model,
            tokens,
            compiled=compiled,
            optimizer=optimizer,
            precision=calibrated_as,
            blocks=BLOCKS,
            device=_device(device),
            measure=real is not None,
            measure_on=real,
        )
        del real
        _release_cached_memory()
        return {b: stored_as(p, spec, cfg, compiled=compiled) for b, p in found.items()}

    return choose_plan(
        profiles_at(batch, measure),
        budget_bytes=budget_bytes,
        world_size=world_size,
        overheads=overheads,
        profile_at=lambda rows: profiles_at(rows, False)[1.0],
        compiled=compiled,
        placement=placement,
    )


def stored_as(profile: Profile, precision: PrecisionSpec, cfg: ModelConfig, *, compiled: bool) -> Profile:
    """``profile`` for the bench's ``precision``: run eagerly, the master update makes
    ``MASTER_UPDATE_TEMPORARIES`` fp32 tensors of the largest parameter (the embedding or the
    output projection), compiled it is one fused kernel. A profile calibrated with fp32
    weights, gradients and AdamW state is converted too: with bf16 parameters the weights
    and gradients take 2 bytes an element and AdamW keeps fp32 master weights beside its two
    fp32 moments (a profile calibrated in the precision has its bytes already)."""
    if precision.param_itemsize is None:
        return profile
    largest = 4 * cfg.vocab_size * cfg.dim
    scratch = 0 if compiled else MASTER_UPDATE_TEMPORARIES * largest
    if profile.precision == precision.name:
        return replace(profile, step_scratch=scratch)
    fp32_block, fp32_other = profile.block_param_bytes, profile.other_param_bytes
    block, other = fp32_block * precision.param_itemsize // 4, fp32_other * precision.param_itemsize // 4
    states = profile.optimizer_states + precision.master_itemsize // 4
    return replace(
        profile,
        block_param_bytes=block,
        other_param_bytes=other,
        block_grad_bytes=block,
        other_grad_bytes=other,
        block_state_bytes=states * fp32_block,
        other_state_bytes=states * fp32_other,
        block_master_bytes=fp32_block * precision.master_itemsize // 4,
        other_master_bytes=fp32_other * precision.master_itemsize // 4,
        step_scratch=scratch,
        largest_param_bytes=profile.largest_param_bytes * precision.param_itemsize // 4,
        precision=precision.name,
    )


def measure_real_block(profile: Profile, cfg: ModelConfig, *, batch: int, seq: int, compiled: bool = False, timed: bool = True) -> Profile:
    """``profile`` with one real block per choice run where it will train: on a CUDA GPU its
    bytes from the allocator; when ``timed``, its recompute costs from timing it (on the
    CPU without a GPU). Where they do not fit, ``profile``."""
    return measure_compiled_blocks(profile, cfg, batch=batch, seq=seq, budgets=(1.0,), compiled=compiled, timed=timed)[1.0]


def measure_compiled_blocks(
    profile: Profile,
    cfg: ModelConfig,
    *,
    batch: int,
    seq: int,
    budgets: tuple[float, ...] = COMPILER_BUDGETS,
    compiled: bool = True,
    timed: bool = True,
) -> dict[float, Profile]:
    """One profile per activation memory budget of the kept blocks, all from real compiled
    blocks measured by the CUDA allocator and timed in one round robin (so their times
    compare); the selective and fully recomputed blocks are the same in each. Where the
    blocks do not fit: ``{1.0: profile}``."""
    real = _one_block_or_none(cfg, batch=batch, seq=seq)
    if real is None:
        return {1.0: profile}
    try:
        return measured_profiles(
            profile, *real, run=find_blocks(real[0], BLOCKS), precision=BENCH_AUTOCAST, compiled=compiled, timed=timed, budgets=budgets
        )
    finally:
        del real
        _release_cached_memory()


def _dtype_of(precision: PrecisionSpec) -> Any:
    """The real block's parameter dtype for ``precision``: bf16 where it stores 2 bytes, else None (fp32)."""
    if precision.param_itemsize != 2:
        return None
    import torch

    return torch.bfloat16


def _one_block_or_none(cfg: ModelConfig, *, batch: int, seq: int, dtype: Any = None) -> tuple[nn.Module, Any] | None:
    """``one_block`` on the GPU (the CPU without one); None where it does not fit."""
    import torch

    try:
        return one_block(cfg, batch=batch, seq=seq, device="cuda" if cuda_available() else "cpu", dtype=dtype)
    except torch.OutOfMemoryError:
        return None


def _release_cached_memory() -> None:
    """Give the measured block's segments back, so that the training step planned here finds
    them (the planned peak leaves no room for them)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure_blocks(
    cfg: ModelConfig, *, batch: int, seq: int, device: str = "cuda", compiled: bool = False, timed: bool = True, steps: int = 7
) -> tuple[dict[Any, Any] | None, dict[Any, float] | None]:
    """One real block of ``cfg`` per choice on ``device``, measured by ``realblock.measure_real``:
    (its bytes per choice on a CUDA device, else None; its seconds per choice when ``timed``)."""
    model, x = one_block(cfg, batch=batch, seq=seq, device=device)
    try:
        return measure_real(model, x, run=find_blocks(model, BLOCKS), precision=BENCH_AUTOCAST, compiled=compiled, timed=timed, steps=steps)
    finally:
        reset_compiler(compiled)


def block_op_counts(cfg: ModelConfig, *, batch: int, seq: int, device: str | None = None) -> tuple[int, int]:
    """Ops dispatched by one kept block's forward and its backward: the unit of host cost."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    dev = _device(device)
    model, tokens = decoder_on_meta(cfg, batch=batch, seq=seq)
    run = find_blocks(model, BLOCKS)
    with FakeTensorMode():
        fake = fake_copy(model, dev, BENCH_AUTOCAST)
        block = fake.get_submodule(run.path)[run.first]
        call = record_call(fake, block, fake_like(tokens, dev), label="block", context=autocast_for(dev, BENCH_AUTOCAST))
        _, fwd, bwd = measure_block(block, Choice.KEEP, call, dev, BENCH_AUTOCAST, Roofline())
    return fwd.ops, bwd.ops


def fake_step_peak(cfg: ModelConfig, choices: tuple[Choice, ...], *, batch: int, seq: int, device: str | None = None) -> int:
    """Peak live bytes of a whole second training step of ``cfg`` under ``choices``, on fake
    tensors (``reference.fake_step_peak``): the reference the memory model is checked against."""
    model, tokens = decoder_on_meta(cfg, batch=batch, seq=seq)
    return whole_step_peak(model, tokens, choices, blocks=BLOCKS, device=_device(device))


def _device(device: str | None) -> str:
    if device:
        return device
    return "cuda" if cuda_available() else "cpu"

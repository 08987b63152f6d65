"""Optimizers and precisions as data: the bytes each keeps per parameter tensor.

An optimizer is a table row, not code: how many tensors of the parameter's size it keeps
(AdamW's two moments, SGD's momentum buffer), whether it factors the second moment of a
matrix into a row and a column (Adafactor), the bytes per element of 8-bit states with
their block-wise scales (bitsandbytes), and what its step allocates and frees (foreach
implementations build temporaries the size of all parameters; fused ones do not).
A precision says how parameters are stored and whether an fp32 master copy is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainstack.errors import UsageError


@dataclass(frozen=True)
class OptimizerSpec:
    name: str
    full_states: int = 0  # tensors of the parameter's shape and state dtype
    factored: bool = False  # Adafactor: a row and a column vector for each matrix, full for vectors
    state_bytes_per_element: float | None = None  # fixed bytes per element (8-bit states), not the state dtype's
    small_tensor_elements: int = 0  # tensors under this many elements keep 32-bit states (bitsandbytes)
    step_scratch: float = 0.0  # the step's temporaries, as a fraction of the trainable parameters' state-dtype bytes
    # the step's temporaries as tensors of its largest parameter (a for-loop step takes the
    # parameters one at a time: AdamW's denominator is a square root, then its quotient)
    largest_scratch: int = 0

    def state_bytes(self, shape: tuple[int, ...], state_itemsize: int) -> int:
        numel = math.prod(shape)
        if self.state_bytes_per_element is not None:
            if numel < self.small_tensor_elements:
                return self.full_states * numel * 4
            return math.ceil(self.state_bytes_per_element * numel)
        if self.factored and len(shape) >= 2:
            rows, cols = math.prod(shape[:-1]), shape[-1]
            return (rows + cols) * state_itemsize
        return (self.full_states + (1 if self.factored else 0)) * numel * state_itemsize


# 8-bit Adam(W) of bitsandbytes: two uint8 states plus one fp32 scale per block of 256 per state.
_BNB_8BIT = 2 * (1 + 4 / 256)

OPTIMIZERS = {
    "adamw": OptimizerSpec("AdamW (fused)", full_states=2),
    "adam": OptimizerSpec("Adam (fused)", full_states=2),
    "adamw-foreach": OptimizerSpec("AdamW (foreach)", full_states=2, step_scratch=1.0),
    "adamw-forloop": OptimizerSpec("AdamW (for-loop)", full_states=2, largest_scratch=2),
    "sgd": OptimizerSpec("SGD", full_states=0),
    "sgd-momentum": OptimizerSpec("SGD with momentum", full_states=1),
    "adafactor": OptimizerSpec("Adafactor", factored=True),
    "adamw8bit": OptimizerSpec("AdamW 8-bit (bitsandbytes)", full_states=2, state_bytes_per_element=_BNB_8BIT, small_tensor_elements=4096),
}
OPTIMIZERS["adam8bit"] = OptimizerSpec(
    "Adam 8-bit (bitsandbytes)", full_states=2, state_bytes_per_element=_BNB_8BIT, small_tensor_elements=4096
)


@dataclass(frozen=True)
class PrecisionSpec:
    name: str
    param_itemsize: int | None  # bytes per stored floating parameter element; None: as the model has it
    master_itemsize: int = 0  # an fp32 master copy per parameter, owned by the optimizer
    state_itemsize: int | None = None  # optimizer state dtype; None: the parameter's
    autocast: bool = True  # bf16 autocast over the forward


PRECISIONS = {
    "autocast-bf16": PrecisionSpec("bf16 autocast, weights as stored (fp32)", param_itemsize=None),
    "bf16": PrecisionSpec(
        "bf16 parameters, fp32 master weights and optimizer state", param_itemsize=2, master_itemsize=4, state_itemsize=4, autocast=False
    ),
    "fp32": PrecisionSpec("fp32, no autocast", param_itemsize=None, autocast=False),
}


def optimizer_spec(optimizer: object) -> OptimizerSpec:
    """The spec for a name in ``OPTIMIZERS``, or for a torch optimizer instance (by its class
    and, for SGD, its momentum; foreach AdamW and Adam when neither fused nor foreach=False)."""
    if isinstance(optimizer, OptimizerSpec):
        return optimizer
    if isinstance(optimizer, str):
        key = optimizer.lower()
        if key not in OPTIMIZERS:
            raise UsageError(f"optimizer '{optimizer}' is not known to memplan; accepted: {', '.join(OPTIMIZERS)} or a torch optimizer")
        return OPTIMIZERS[key]
    name = type(optimizer).__name__.lower()
    defaults = getattr(optimizer, "defaults", {}) or {}
    if "8bit" in name:
        return OPTIMIZERS["adam8bit" if name.startswith("adam8") else "adamw8bit"]
    if name in ("adamw", "adam"):
        if defaults.get("fused"):
            return OPTIMIZERS[name]
        return OPTIMIZERS["adamw-forloop" if defaults.get("foreach") is False else "adamw-foreach"]
    if name == "sgd":
        return OPTIMIZERS["sgd-momentum" if defaults.get("momentum") else "sgd"]
    if name == "adafactor":
        return OPTIMIZERS["adafactor"]
    raise UsageError(f"optimizer {type(optimizer).__name__} is not known to memplan; accepted: {', '.join(OPTIMIZERS)}")


def precision_spec(precision: str | PrecisionSpec) -> PrecisionSpec:
    if isinstance(precision, PrecisionSpec):
        return precision
    if precision not in PRECISIONS:
        raise UsageError(f"precision '{precision}' is not known to memplan; accepted: {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]

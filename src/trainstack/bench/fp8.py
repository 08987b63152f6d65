"""Float8 linear layers for training, through torchao's float8 training.

``convert(model, recipe)`` swaps the ``nn.Linear`` layers of the blocks for torchao's
``Float8Linear`` (dynamic scaling: ``tensorwise``, one scale per tensor, or ``rowwise``,
one per row; ``tensorwise-fastacc`` is tensorwise with cuBLAS's fast accumulation in all
three products, where torchao's recipe uses it in the forward product alone: faster
backward products, whose sums are then not promoted to fp32 as they go: on an H200 it ran
1b 1.168x and 3b 1.225x over bf16 where tensorwise ran 1.146x and 1.204x, with a 125m parity
gap of 0.03% against tensorwise's 0.04%) and returns what it converted and what
it left in higher precision, and why:

- the output projection (lm head): the loss multiplies by its weight directly, and its
  logits feed a softmax over the whole vocabulary, where float8 rounding costs accuracy;
- any layer whose input or output width is not a multiple of 16 (float8 matrix products
  need both divisible by 16);
- any layer too small for float8 to pay for its casts: each float8 product first reduces its
  inputs to their scales and casts them (and, in backward, the gradient and transposed copies),
  passes over the activations that cost more than the faster product saves when the weight
  is small. The thresholds (``SMALL``, in K = input and N = output width) are torchao's, from
  its per-shape measurements of float8 linear layers on H100 (forward and backward, compiled):
  tensorwise pays off unless K <= 4096 and N <= 1024; rowwise, whose products are slower,
  needs N > 2048, K > 1024 and not both N <= 4096 and K <= 2048.

Float8 matrix products need an NVIDIA GPU of compute capability 8.9 or newer (Ada,
Hopper, Blackwell); ``require`` says so in one line, as it does when torchao is missing.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from torch import nn

from trainstack.bench.modes import ModeUnavailable

RECIPES = ("tensorwise", "rowwise", "tensorwise-fastacc")
FAST_ACCUMULATION = "-fastacc"  # a recipe's suffix: fast accumulation in every product
MIN_CAPABILITY = (8, 9)
DIVISOR = 16  # float8 matrix products need both dimensions divisible by 16
EXTRA = "pip install 'trainstack[fp8]'  (torchao)"
# recipe -> ((K <=, N <=) pairs: a layer within any pair stays in bf16, its rule as printed)
SMALL: dict[str, tuple[tuple[int | None, int | None], ...]] = {
    "tensorwise": ((4096, 1024),),
    "rowwise": ((None, 2048), (1024, None), (2048, 4096)),
}


@dataclass(frozen=True)
class Conversion:
    """Which linear layers run in float8 and which stay in the model's precision, and why."""

    recipe: str
    converted: tuple[str, ...]
    kept: dict[str, str] = field(default_factory=dict)  # layer name -> why it was kept

    def summary(self) -> str:
        """One line; kept layers of the same place in every block and the same reason are
        named once, with their count (``layers.*.attention.wo x12``)."""
        groups: dict[tuple[str, str], list[str]] = {}
        for name, why in self.kept.items():
            groups.setdefault((re.sub(r"(^|\.)\d+(?=\.|$)", r"\1*", name), why), []).append(name)
        kept = (
            "; ".join(f"{names[0] if len(names) == 1 else f'{pattern} x{len(names)}'} ({why})" for (pattern, why), names in groups.items())
            or "none"
        )
        total = len(self.converted) + len(self.kept)
        scaling = base_recipe(self.recipe) + (
            " scaling, fast accumulation in every product" if self.recipe.endswith(FAST_ACCUMULATION) else " scaling"
        )
        return f"float8 {scaling} (torchao): {len(self.converted)} of {total} linear layers; kept in bf16: {kept}"


def base_recipe(recipe: str) -> str:
    """The scaling granularity of ``recipe`` (``tensorwise-fastacc`` scales as ``tensorwise``)."""
    return recipe.removesuffix(FAST_ACCUMULATION)


def torchao_missing() -> bool:
    return importlib.util.find_spec("torchao") is None


def require(device) -> None:
    """Raise ModeUnavailable (one line) when float8 training cannot run on ``device``."""
    if torchao_missing():
        raise ModeUnavailable(f"unavailable: fp8 needs torchao: {EXTRA}")
    if device.type != "cuda":
        raise ModeUnavailable(
            f"unavailable: fp8 needs an NVIDIA GPU of compute capability {_cc(MIN_CAPABILITY)} or newer; this run is on {device.type}"
        )
    import torch

    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise ModeUnavailable(
            f"unavailable: fp8 needs compute capability {_cc(MIN_CAPABILITY)} or newer (Ada, Hopper, Blackwell); {name} is {_cc(capability)}"
        )


def _cc(capability: tuple[int, int]) -> str:
    return f"sm{capability[0]}{capability[1]}"


def output_heads(model: nn.Module) -> set[int]:
    """ids of the model's output projection modules (the bench decoder's ``output``, a
    Hugging Face model's output embeddings)."""
    heads = [getattr(model, "output", None)]
    hf = getattr(model, "hf", None)
    if hf is not None and hasattr(hf, "get_output_embeddings"):
        heads.append(hf.get_output_embeddings())
    return {id(m) for m in heads if m is not None}


def too_small(recipe: str, k: int, n: int) -> str | None:
    """The size rule under which a K x N float8 product of ``recipe`` is slower than bf16, or None."""
    scaling = base_recipe(recipe)
    for max_k, max_n in SMALL[scaling]:
        if (max_k is None or k <= max_k) and (max_n is None or n <= max_n):
            rule = " and ".join(f"{dim} <= {v}" for dim, v in (("K", max_k), ("N", max_n)) if v is not None)
            return f"{k}x{n}: too small for float8 {scaling} to pay for its casts ({rule})"
    return None


def why_kept(module: nn.Linear, heads: set[int], recipe: str = "tensorwise") -> str | None:
    """None when ``module`` converts to float8; else why it stays in higher precision."""
    if id(module) in heads:
        return "output projection"
    if module.in_features % DIVISOR or module.out_features % DIVISOR:
        return f"{module.in_features}x{module.out_features} not divisible by {DIVISOR}"
    return too_small(recipe, module.in_features, module.out_features)


def plan_conversion(model: nn.Module, recipe: str) -> Conversion:
    """What ``convert`` would do to ``model``, without touching it."""
    if recipe not in RECIPES:
        raise ValueError(f"fp8 recipe '{recipe}'; accepted: {', '.join(RECIPES)}")
    heads = output_heads(model)
    converted, kept = [], {}
    for name, module in model.named_modules():
        if type(module) is not nn.Linear:
            continue
        reason = why_kept(module, heads, recipe)
        if reason is None:
            converted.append(name)
        else:
            kept[name] = reason
    return Conversion(recipe, tuple(converted), kept)


def convert(model: nn.Module, recipe: str, *, emulate: bool = False) -> Conversion:
    """Swap ``model``'s convertible linear layers for torchao's Float8Linear in place.

    ``emulate``: float8 arithmetic emulated in higher precision (runs anywhere, slowly; for tests).
    ModeUnavailable when no layer would convert: such a row would be a bf16 run named fp8."""
    conversion = plan_conversion(model, recipe)
    if not conversion.converted:
        raise ModeUnavailable(
            f"unavailable: float8 {recipe} would convert none of the model's {len(conversion.kept)} linear layers "
            f"(each is the output projection, not divisible by {DIVISOR}, or too small for float8 {recipe} to pay for its casts)"
        )
    chosen = set(conversion.converted)
    swap_linears(model, recipe, lambda name: name in chosen, emulate=emulate)
    return conversion


def swap_linears(model: nn.Module, recipe: str, selected: Callable[[str], bool], *, emulate: bool = False) -> None:
    """torchao's Float8Linear of ``recipe`` in place of each of ``model``'s ``nn.Linear``
    layers whose name ``selected`` accepts (no size rule: ``convert`` applies those), each fed
    its input as one matrix (``_flat_input_linear``)."""
    float8 = _torchao_float8()
    float8.convert_to_float8_training(
        model, config=float8_config(recipe, emulate=emulate), module_filter_fn=lambda module, fqn: selected(fqn)
    )
    torchao_linear = float8.float8_linear.Float8Linear
    flat_input = _flat_input_linear(torchao_linear)
    for module in model.modules():
        if type(module) is torchao_linear:
            module.__class__ = flat_input


@functools.cache
def _flat_input_linear(float8_linear: type) -> type:
    """torchao's ``Float8Linear`` fed its input as one matrix (tokens, features).

    Float8Linear's backward reduces its saved input to a scale again for the weight's gradient,
    on the input reshaped to two dimensions; when the forward was handed three (batch, sequence,
    features), the two reductions are over different views of one tensor and the compiler keeps
    both: a second full pass over every converted layer's input (and the kernels that produce it,
    recomputed). Handed a matrix, the reshape is the identity, the compiler's common-subexpression
    pass merges the two, and the backward reduces only the gradients. The same arithmetic, so the
    same results: only the repeated passes go."""

    class Float8LinearFlatInput(float8_linear):
        def forward(self, input):  # nn.Linear's name
            if input.dim() <= 2:
                return super().forward(input)
            return super().forward(input.reshape(-1, input.shape[-1])).unflatten(0, input.shape[:-1])

    Float8LinearFlatInput.__qualname__ = Float8LinearFlatInput.__name__
    return Float8LinearFlatInput


def float8_config(recipe: str, *, emulate: bool = False):
    """torchao's Float8LinearConfig of ``recipe`` (one of ``RECIPES``)."""
    float8 = _torchao_float8()
    config = float8.Float8LinearConfig.from_recipe_name(base_recipe(recipe))
    if recipe.endswith(FAST_ACCUMULATION):
        fast = float8.Float8GemmConfig(use_fast_accum=True)
        config = replace(config, gemm_config_output=fast, gemm_config_grad_input=fast, gemm_config_grad_weight=fast)
    return replace(config, emulate=True) if emulate else config


def _torchao_float8():
    """torchao.float8, importing torchao with its start-up warnings (C++ extensions built for
    another torch, which float8 training does not use) kept out of the output."""
    logger = logging.getLogger("torchao")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import torchao.float8 as float8
    except ImportError:
        raise ModeUnavailable(f"unavailable: fp8 needs torchao: {EXTRA}") from None
    finally:
        logger.setLevel(level)
    return float8

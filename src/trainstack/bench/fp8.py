"""Float8 linear layers for training, through torchao's float8 training.

``convert(model, recipe)`` swaps the ``nn.Linear`` layers of the blocks for torchao's
``Float8Linear`` (dynamic scaling: ``tensorwise``, one scale per tensor, or ``rowwise``,
one per row) and returns what it converted and what it left in higher precision, and why:

- the output projection (lm head): the loss multiplies by its weight directly, and its
  logits feed a softmax over the whole vocabulary, where float8 rounding costs accuracy;
- any layer whose input or output width is not a multiple of 16 (float8 matrix products
  need both divisible by 16).

Float8 matrix products need an NVIDIA GPU of compute capability 8.9 or newer (Ada,
Hopper, Blackwell); ``require`` says so in one line, as it does when torchao is missing.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field

from torch import nn

from trainstack.bench.modes import ModeUnavailable

RECIPES = ("tensorwise", "rowwise")
MIN_CAPABILITY = (8, 9)
DIVISOR = 16  # float8 matrix products need both dimensions divisible by 16
EXTRA = "pip install 'trainstack[fp8]'  (torchao)"


@dataclass(frozen=True)
class Conversion:
    """Which linear layers run in float8 and which stay in the model's precision, and why."""

    recipe: str
    converted: tuple[str, ...]
    kept: dict[str, str] = field(default_factory=dict)  # layer name -> why it was kept

    def summary(self) -> str:
        kept = "; ".join(f"{name} ({why})" for name, why in self.kept.items()) or "none"
        total = len(self.converted) + len(self.kept)
        return f"float8 {self.recipe} scaling (torchao): {len(self.converted)} of {total} linear layers; kept in bf16: {kept}"


def torchao_missing() -> bool:
    return importlib.util.find_spec("torchao") is None


def require(device) -> None:
    """Raise ModeUnavailable (one line) when float8 training cannot run on ``device``."""
    if torchao_missing():
        raise ModeUnavailable(f"unavailable: fp8 needs torchao: {EXTRA}")
    if device.type != "cuda":
        raise ModeUnavailable(f"unavailable: fp8 needs an NVIDIA GPU of compute capability {_cc(MIN_CAPABILITY)} or newer; this run is on {device.type}")
    import torch

    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise ModeUnavailable(f"unavailable: fp8 needs compute capability {_cc(MIN_CAPABILITY)} or newer (Ada, Hopper, Blackwell); {name} is {_cc(capability)}")


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


def why_kept(module: nn.Module, heads: set[int]) -> str | None:
    """None when ``module`` converts to float8; else why it stays in higher precision."""
    if id(module) in heads:
        return "output projection"
    if module.in_features % DIVISOR or module.out_features % DIVISOR:
        return f"{module.in_features}x{module.out_features} not divisible by {DIVISOR}"
    return None


def plan_conversion(model: nn.Module, recipe: str) -> Conversion:
    """What ``convert`` would do to ``model``, without touching it."""
    heads = output_heads(model)
    converted, kept = [], {}
    for name, module in model.named_modules():
        if type(module) is not nn.Linear:
            continue
        reason = why_kept(module, heads)
        if reason is None:
            converted.append(name)
        else:
            kept[name] = reason
    return Conversion(recipe, tuple(converted), kept)


def convert(model: nn.Module, recipe: str, *, emulate: bool = False) -> Conversion:
    """Swap ``model``'s convertible linear layers for torchao's Float8Linear in place.

    ``emulate``: float8 arithmetic emulated in higher precision (runs anywhere, slowly; for tests)."""
    if recipe not in RECIPES:
        raise ValueError(f"fp8 recipe '{recipe}'; accepted: {', '.join(RECIPES)}")
    conversion = plan_conversion(model, recipe)
    float8 = _torchao_float8()
    config = float8.Float8LinearConfig.from_recipe_name(recipe)
    if emulate:
        from dataclasses import replace

        config = replace(config, emulate=True)
    chosen = set(conversion.converted)
    float8.convert_to_float8_training(model, config=config, module_filter_fn=lambda module, fqn: fqn in chosen)
    return conversion


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

"""A model run on fake tensors: a copy of it whose parameters are fake tensors of the target
device, a fake batch, a dispatch mode that answers as a real step would where torch's fake
kernels answer otherwise, the libraries kept on their eager path, and the one-line reason
when fake tensors cannot run the model."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from trainstack.memplan.blocks import UnplannableModel
from trainstack.memplan.optim import PrecisionSpec
from trainstack.memplan.tracking import dispatch_mode_base
from trainstack.memplan.wrappers import cache_configs


def fake_copy(model: Any, device: Any, precision: PrecisionSpec) -> Any:
    """Under an active FakeTensorMode: the model with fake parameters and buffers on
    ``device`` (tied parameters stay tied), in training mode; the model itself is untouched."""
    import torch
    from torch import nn

    memo: dict[int, Any] = {}
    for p in unique_tensors(model.parameters()):
        dtype = torch.bfloat16 if precision.param_itemsize == 2 and p.is_floating_point() else p.dtype
        memo[id(p)] = nn.Parameter(torch.empty(p.shape, dtype=dtype, device=device), requires_grad=p.requires_grad)
    for b in unique_tensors(model.buffers()):
        memo[id(b)] = torch.empty(b.shape, dtype=b.dtype, device=device)
    # tensors a module holds as plain attributes, not buffers (GPT-J's sinusoidal positions in
    # transformers 4.46): faked as buffers are, which a copy under fake tensors cannot copy
    for module in model.modules():
        for value in vars(module).values():
            if isinstance(value, torch.Tensor) and id(value) not in memo:
                memo[id(value)] = torch.empty(value.shape, dtype=value.dtype, device=device)
    try:
        fake = copy.deepcopy(model, memo)
    except Exception as exc:  # noqa: BLE001 - any failure to copy is the model's: one line
        raise UnplannableModel(
            f"{type(model).__name__} cannot be copied for calibration ({type(exc).__name__}: {first_line(exc)})"
        ) from None
    for config in cache_configs(fake):
        config.use_cache = False  # see model_step.no_kv_cache
    return fake.train()


def unique_tensors(tensors: Any) -> list[Any]:
    """The tensors, each once: a parameter tied between modules is counted and faked once."""
    seen: dict[int, Any] = {}
    for t in tensors:
        seen.setdefault(id(t), t)
    return list(seen.values())


def fake_like(batch: Any, device: Any) -> Any:
    """Under an active FakeTensorMode: fake tensors with the batch's shapes and dtypes on ``device``."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device) if isinstance(t, torch.Tensor) else t, batch)


def fake_as_real() -> Any:
    """A dispatch mode over fake tensors that answers as a real step would, where torch's
    fake kernels answer otherwise:

    - the truth value of a fake boolean tensor (``mask.all()`` in an ``if``) is True: a mask
      without padding, sequences not packed, the common case of a training batch. Other
      values read from fake data stay an error.
    - but a uniform draw compared with a number (LayerDrop: ``torch.rand([]) < layerdrop``
      skips a layer) answers as the draw most often would: true where the comparison holds
      with a probability over one half, so a block dropped with probability 0 (BART's
      and Whisper's default under transformers 4.x) or 0.1 runs, as it does in most steps.
    - a grouped matrix product (mixture-of-experts layers) of float32 operands, which the
      real kernels multiply (a model trained in float32 weights under autocast) and torch's
      fake kernel refuses, takes its shape from the fake kernel asked in bf16 and keeps the
      operands' dtype."""
    import torch

    aten = torch.ops.aten
    local_scalar = aten._local_scalar_dense.default
    grouped = getattr(getattr(aten, "_grouped_mm", None), "default", None)
    uniform = {aten.rand.default, aten.uniform.default, aten.uniform_.default}
    # P(draw OP number) for a draw uniform in [0, 1)
    below = {aten.lt.Scalar: lambda p: p, aten.le.Scalar: lambda p: p, aten.gt.Scalar: lambda p: 1 - p, aten.ge.Scalar: lambda p: 1 - p}

    class FakeAsReal(dispatch_mode_base()):  # type: ignore[misc]  # the base is torch's dispatch mode of the installed version, chosen at run time
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is local_scalar and args[0].dtype == torch.bool:
                return getattr(args[0], "_trainstack_likely", True)
            if func is grouped and kwargs.get("out_dtype") is None and args[0].dtype == args[1].dtype != torch.bfloat16:
                a, b, *rest = args
                return func(a.to(torch.bfloat16), b.to(torch.bfloat16), *rest, **kwargs).to(a.dtype)
            out = func(*args, **kwargs)
            if (
                func in uniform
                and isinstance(out, torch.Tensor)
                and (tuple(args[1:3]) or (kwargs.get("from", 0), kwargs.get("to", 1))) in ((0, 1), (0.0, 1.0))
            ):
                out._trainstack_uniform = True  # a draw in [0, 1), as torch.rand makes
            elif func in below and getattr(args[0], "_trainstack_uniform", False) and isinstance(args[1], (int, float)):
                out._trainstack_likely = below[func](float(args[1])) > 0.5
            return out

    return FakeAsReal()


# Functions by which libraries ask "is this tensor fake?", to take a tracing path (a
# materialised mask, repeated key/value heads) instead of the one a real step takes.
# Calibration answers False, so that fake tensors measure the real step; where the eager
# path needs the data (a padding mask checked for zeros), it calibrates the tracing path.
TRACING_CHECKS = (("transformers.utils.import_utils", "is_fake_tensor"),)


@contextmanager
def as_eager(enabled: bool = True) -> Iterator[None]:
    """While inside (when ``enabled``): every check of ``TRACING_CHECKS`` loaded answers False."""
    import sys

    patched = []
    for module_name, attr in TRACING_CHECKS if enabled else ():
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, attr):
            patched.append((module, attr, getattr(module, attr)))
            setattr(module, attr, lambda *_a, **_k: False)
    try:
        yield
    finally:
        for module, attr, original in patched:
            setattr(module, attr, original)


FAKE_ERRORS_HINT = "memplan calibrates on fake tensors, which need a fake (meta) kernel for every op and no data-dependent shapes"


def fake_failure(exc: BaseException, model: Any = None) -> str | None:
    """One line for a failure of fake-tensor execution, or None for another failure."""
    from torch._subclasses import fake_tensor as ft

    if isinstance(exc, ft.UnsupportedOperatorException):
        return f"op {exc.func} has no fake-tensor kernel ({FAKE_ERRORS_HINT})"
    if isinstance(exc, (ft.DynamicOutputShapeException, ft.DataDependentOutputException)) and _has_experts(model):
        return (
            f"op {exc.func} has a data-dependent output: its mixture-of-experts layers gather each expert's tokens by the router's "
            "choice, a number of tokens fake tensors cannot know (experts computed as grouped matrix products, as transformers 5 "
            "computes them, are planned)"
        )
    if isinstance(exc, (ft.DynamicOutputShapeException, ft.DataDependentOutputException)):
        return f"op {exc.func} has a data-dependent output ({FAKE_ERRORS_HINT})"
    if isinstance(exc, ft.UnsupportedFakeTensorException):
        return f"a tensor cannot be faked ({first_line(exc)}; {FAKE_ERRORS_HINT})"
    return None


def _has_experts(model: Any) -> bool:
    """Whether ``model`` holds a mixture of experts (a module named ``experts``)."""
    return model is not None and any(name.rsplit(".", 1)[-1] == "experts" for name, _ in model.named_modules())


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, at most 200 characters; its class's name where it has none."""
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__

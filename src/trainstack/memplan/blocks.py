"""The repeated blocks of any model, found.

The blocks are the longest run of identical modules (same class, same parameter and
buffer shapes) in a ``ModuleList`` or ``Sequential``: the decoder or encoder layers of a
Hugging Face model, a stage of a vision model, or a list the user names. Nothing here
knows an architecture; what differs between models is found by running them
(``calibration``).

A model that cannot be planned raises ``UnplannableModel`` with the reason in one line,
here and in the modules that run and measure it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainstack.errors import SpecError


class UnplannableModel(SpecError):
    """A model memplan cannot plan: the reason names what is missing."""


@dataclass(frozen=True)
class BlockRun:
    """The planned blocks: ``count`` identical modules from ``first`` in the list at ``path``."""

    path: str
    first: int
    count: int
    kind: str


def find_blocks(model: Any, name: str | None = None) -> BlockRun:
    """The blocks to plan: in the list ``name`` (a dotted module name) when given, else in
    the ModuleList or Sequential whose longest run of identical modules holds the most
    parameters (then has the most modules). UnplannableModel where blocks of the same
    parameters are configured differently (``differing_setting``)."""
    found = _named_or_found(model, name)
    blocks = list(model.get_submodule(found.path))[found.first : found.first + found.count]
    if hasattr(blocks[0], "_checkpoint_wrapped_module"):  # torch.distributed's checkpoint_wrapper
        raise UnplannableModel(
            f"the blocks at {found.path or type(model).__name__} are already wrapped for activation checkpointing ({type(blocks[0]).__name__}), "
            "so every one recomputes whatever a plan says; plan the model before wrapping its blocks, and let apply() decide what they recompute"
        )
    differing = differing_setting(blocks)
    if differing is not None:
        setting, values = differing
        shown = ", ".join(repr(v) for v in values[:4])
        raise UnplannableModel(
            f"the blocks at {found.path or type(model).__name__} have the same parameters but differ in '{setting}' ({shown}), "
            "so they need not save the same; memplan plans blocks that are identical"
        )
    return found


def _named_or_found(model: Any, name: str | None) -> BlockRun:
    from torch import nn

    def run_of(path: str, container: Any) -> BlockRun:
        children = list(container)
        start, length = _longest_run(children)
        return BlockRun(path, start, length, type(children[start]).__name__ if children else "")

    if name:
        try:
            container = model.get_submodule(name)
        except AttributeError:
            raise UnplannableModel(
                f"blocks '{name}': no such module in {type(model).__name__}; accepted: the dotted name of a ModuleList or Sequential of blocks"
            ) from None
        if not isinstance(container, (nn.ModuleList, nn.Sequential)) or len(container) == 0:
            raise UnplannableModel(f"blocks '{name}' is a {type(container).__name__}, not a non-empty ModuleList or Sequential of blocks")
        return run_of(name, container)
    best: tuple[tuple[int, int], BlockRun] | None = None
    for path, module in model.named_modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)) and len(module) >= 2:
            found = run_of(path, module)
            key = (_numel(list(module)[found.first : found.first + found.count]), found.count)
            if found.count >= 2 and (best is None or key > best[0]):
                best = (key, found)
    if best is None:
        raise UnplannableModel(
            f"{type(model).__name__}: no repeated blocks found (no ModuleList or Sequential holds two or more identical modules); "
            "name the list of blocks with blocks="
        )
    return best[1]


def _longest_run(children: list[Any]) -> tuple[int, int]:
    """(start, length) of the longest run of identical consecutive modules."""
    best, start = (0, 1 if children else 0), 0
    for i in range(1, len(children) + 1):
        if i == len(children) or _signature(children[i]) != _signature(children[start]):
            if i - start > best[1]:
                best = (start, i - start)
            start = i
    return best


def _signature(module: Any) -> tuple:
    params = tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in module.named_parameters())
    buffers = tuple((n, tuple(b.shape), b.dtype) for n, b in module.named_buffers())
    return type(module), params, buffers


def _numel(modules: list[Any]) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


def differing_setting(blocks: list[Any]) -> tuple[str, list[Any]] | None:
    """A setting that splits the blocks into kinds: one with more than one value, but not a
    different value in every block (as a layer index has)."""
    settings = [_settings(b) for b in blocks]
    for name in settings[0]:
        values = [s.get(name) for s in settings]
        distinct = list(dict.fromkeys(values))
        if 1 < len(distinct) < len(blocks):
            return name, distinct
    return None


_SETTINGS = (bool, int, float, str, type(None))


def _settings(block: Any) -> dict[str, Any]:
    """A block's plain settings (numbers, strings, flags) by dotted name: what may make two
    blocks of the same parameters compute differently (a sliding window on some layers)."""
    found = {}
    for path, module in block.named_modules():
        for name, value in vars(module).items():
            if not name.startswith("_") and isinstance(value, _SETTINGS):
                found[f"{path}.{name}" if path else name] = value
    return found

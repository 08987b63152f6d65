"""The defaults every verb gives a model, in one place: its preset, its sequence and its
training modes; what ``--model`` means; and the help texts naming what each option accepts,
made from the presets and the mode grammar, so that a help text cannot omit a value that is
accepted (bench's and memplan's options read these)."""

from __future__ import annotations

from collections.abc import Sequence

from trainstack.errors import UsageError
from trainstack.nn.modes import DEFAULT_ABLATION, FRAMEWORK_PARTS, PROCESS_PARTS, Mode, parse_mode, parse_modes
from trainstack.nn.presets import REFERENCE_SEQ, REFERENCES, SHAPES, shape

PRESET = "125m"  # the preset a verb plans or measures when no model is named
SEQ = 2048  # the sequence of a model that is not a reference configuration, at most its max_seq
MODE = "compile"  # bench's mode without --modes (DEFAULT_ABLATION with --ablation)

PRESET_HELP = (
    f"Preset: {', '.join(name for name in SHAPES if name not in REFERENCES)}; the reference configurations "
    f"{', '.join(REFERENCES)} (those shapes at sequence {REFERENCE_SEQ})."
)
SEQ_HELP = (
    f"Sequence length [default: {REFERENCE_SEQ} for a reference configuration ({', '.join(REFERENCES)}), "
    f"else {SEQ} or the model's max_seq if smaller]."
)
MODES_HELP = (
    f"A mode, or modes with --ablation (commas) [default: {MODE}].\n\n"
    f"With --ablation and no --modes: {', '.join(DEFAULT_ABLATION)}.\n\n"
    f"A mode's parts, joined by '+': {', '.join(PROCESS_PARTS)};\n\n"
    f"and the frameworks' parts: {', '.join(FRAMEWORK_PARTS)}."
)
MODEL_HELP = "A preset name (as --preset) or, where the verb plans any model, MODULE:FUNCTION (as --factory)."


def seq(given: int | None, *, preset: str | None = None, max_seq: int | None = None) -> int:
    """The sequence a model trains at: ``given`` where there is one; else REFERENCE_SEQ for a
    reference configuration, else SEQ or the model's max_seq (the preset's, or ``max_seq``)
    if smaller. An unknown preset is refused naming the presets."""
    if given is not None:
        return given
    if preset is not None:
        if preset in REFERENCES:
            return REFERENCE_SEQ
        max_seq = shape(preset)["max_seq"]
    return min(SEQ, max_seq) if max_seq else SEQ


def modes(given: str | Sequence[str] | None, *, ablation: bool) -> tuple[Mode, ...]:
    """The modes a bench runs: ``given`` as --modes writes them (commas) or as a stack's [bench]
    table lists them, each parsed once; else MODE, or DEFAULT_ABLATION with --ablation."""
    if given is None or (not isinstance(given, str) and not given):
        return tuple(parse_mode(m) for m in (DEFAULT_ABLATION if ablation else (MODE,)))
    if isinstance(given, str):
        return tuple(parse_modes(given))
    return tuple(parse_mode(m) for m in given)


def model(value: str, verb: str, *, factories: bool) -> tuple[str, str]:
    """What ``--model VALUE`` names, the same on every verb (the old spelling of both --preset and
    --factory): ("factory", VALUE) for MODULE:FUNCTION where the verb plans any model
    (``factories``), else ("preset", VALUE); a value that is neither is refused in one line."""
    if ":" in value and factories:
        return "factory", value
    if value not in SHAPES:
        factory = ", or MODULE:FUNCTION" if factories else " (a MODULE:FUNCTION factory is planned by memplan only)"
        raise UsageError(f"{verb} --model: unknown preset '{value}'; accepted: {', '.join(SHAPES)}{factory}")
    return "preset", value


MODEL_WARNING = "--model is now --preset (a preset name) or --factory (MODULE:FUNCTION, memplan); --model will go"

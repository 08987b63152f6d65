"""The stack's [env] in a venv's activation: an ``export`` per variable, each value one shell
word, appended to ``bin/activate`` (what ``source venv/bin/activate`` runs in sh, bash and zsh)
between marker lines, so a rebuild writes the block once."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from trainstack import grammar
from trainstack.errors import SpecError
from trainstack.fsutil import atomic_write_text

BEGIN = "# trainstack: the stack's [env] (set in the image too)"
END = "# trainstack: end of [env]"


def activation_block(env: Mapping[str, str]) -> str:
    """The lines appended to bin/activate; names and values checked again by their grammar."""
    lines = [BEGIN]
    for name, value in env.items():
        if not grammar.ENV_NAME.fullmatch(name) or not grammar.ENV_VALUE.fullmatch(value):
            raise SpecError(f"env.{grammar.shown(name)}: '{grammar.shown(value)}' cannot be written into an activation "
                            "script (accepted: a variable name and printable ASCII on one line)")
        lines.append(f"export {name}={shlex.quote(value)}")
    return "\n".join([*lines, END]) + "\n"


def write_activation_env(venv: Path, env: Mapping[str, str]) -> Path | None:
    """Append the block to ``venv/bin/activate`` (replacing one written before); None without [env]."""
    script = venv / "bin" / "activate"
    if not env:
        return None
    text = script.read_text(encoding="utf-8")
    if BEGIN in text:  # written before: the block is the script's end
        text = text[: text.index(BEGIN)]
    atomic_write_text(script, text.rstrip("\n") + "\n\n" + activation_block(env))
    return script

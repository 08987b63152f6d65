"""The stack's [env] in a venv's activation: an ``export`` per variable, each value one shell
word, appended to ``bin/activate`` (what ``source venv/bin/activate`` runs in sh, bash and zsh)
between marker lines, so a rebuild writes the block once. Each variable's earlier value is kept,
and ``deactivate`` gives it back (or unsets a variable that was not set), as it does for PATH."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from trainstack import grammar
from trainstack.errors import BuildError, SpecError
from trainstack.fsutil import atomic_write_text
from trainstack.trust import reserved_name

BEGIN = "# trainstack: the stack's [env] (set in the image too)"
END = "# trainstack: end of [env]"
RESTORE = "_trainstack_env_restore"
CALL = f'    command -v {RESTORE} >/dev/null 2>&1 && {RESTORE} "${{1:-}}"  # trainstack: the stack\'s [env] given back'
# the function every venv's (python -m venv, uv) bin/activate defines, at the start of a line
_DEACTIVATE = re.compile(r"^deactivate \(\) \{[ \t]*$", re.MULTILINE)


def activation_block(env: Mapping[str, str]) -> str:
    """The lines appended to bin/activate; names and values checked again by their grammar."""
    lines, restore = [BEGIN], [f"{RESTORE} () {{"]
    for name, value in env.items():
        if not grammar.ENV_NAME.fullmatch(name) or not grammar.ENV_VALUE.fullmatch(value):
            raise SpecError(
                f"env.{grammar.shown(name)}: '{grammar.shown(value)}' cannot be written into an activation "
                "script (accepted: a variable name and printable ASCII on one line)"
            )
        if reserved_name(name) is not None:  # it would overwrite a value kept for deactivate
            raise SpecError(f"env.{grammar.shown(name)}: a name the activation keeps to itself ({reserved_name(name)})")
        kept, was_set = f"_TRAINSTACK_OLD_{name}", f"_TRAINSTACK_HAD_{name}"
        lines.append(f'if [ -n "${{{name}+x}}" ]; then {was_set}=1; {kept}="${name}"; fi')
        lines.append(f"export {name}={shlex.quote(value)}")
        restore.append(f'    if [ -n "${{{was_set}:-}}" ]; then export {name}="${kept}"; else unset {name}; fi')
        restore.append(f"    unset {kept} {was_set}")
    restore += ['    if [ ! "${1:-}" = "nondestructive" ]; then', f"        unset -f {RESTORE}", "    fi", "}"]
    return "\n".join([*lines, *restore, END]) + "\n"


def write_activation_env(venv: Path, env: Mapping[str, str]) -> Path | None:
    """Append the block to ``venv/bin/activate`` (replacing one written before); None without [env]."""
    script = venv / "bin" / "activate"
    if not env:
        return None
    text = script.read_text(encoding="utf-8")
    if BEGIN in text:  # written before: the block is the script's end
        text = text[: text.index(BEGIN)]
    if CALL not in text:
        found = _DEACTIVATE.search(text)
        if found is None:
            raise BuildError(
                f"{script}: no 'deactivate () {{' line to give the stack's [env] back in "
                "(accepted: the activation script python -m venv or uv writes)"
            )
        text = text[: found.end()] + "\n" + CALL + text[found.end() :]
    atomic_write_text(script, text.rstrip("\n") + "\n\n" + activation_block(env))
    return script

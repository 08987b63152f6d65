"""The stack's [env] as the environment really sets it: the venv's activation script sourced by
sh, then the environment's own Python asked for each variable's value."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

from pydantic import BaseModel

from trainstack import proc
from trainstack.verify.target import Target, last_json

ASK = "import json, os, sys; print(json.dumps({n: os.environ.get(n) for n in sys.argv[1:]}))"
# sourced, then the interpreter with the variable names as its arguments
SOURCE = '. "$1" >/dev/null 2>&1 || exit 97; shift; exec "$@"'


class EnvSetting(BaseModel):
    name: str
    declared: str  # what the stack's [env] says
    found: str | None  # what the environment sets (None: not set)
    checked: bool  # False: no activation script to source (not a venv trainstack built)

    @property
    def ok(self) -> bool:
        return not self.checked or self.found == self.declared


def check_env(target: Target, declared: Mapping[str, str]) -> list[EnvSetting]:
    """Each declared variable with the value sourcing ``bin/activate`` gives it; a clean
    environment (the declared names removed first) so the caller's own values do not count."""
    if not declared:
        return []
    script = target.bin_dir / "activate"
    names = list(declared)
    found: dict[str, str | None] = {}
    checked = script.is_file() and not script.is_symlink()
    if checked:
        argv = ["sh", "-c", SOURCE, "sh", str(script), str(target.python), "-I", "-c", ASK, *names]
        try:
            result = proc.run(["env", *(w for n in names for w in ("-u", n)), *argv], echo=False, timeout=60)
            answer = last_json(result.stdout) if result.ok else None
        except (OSError, subprocess.SubprocessError):
            answer = None
        found = {n: v for n, v in answer.items() if isinstance(v, str)} if isinstance(answer, dict) else {}
    return [EnvSetting(name=n, declared=v, found=found.get(n), checked=checked) for n, v in declared.items()]

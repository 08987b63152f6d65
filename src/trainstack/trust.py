"""What a stack asks to run on the machine that verifies or builds it, and which of it is
pytest (runs without --trust). Pure: used by `check` to show it and by verify to refuse it."""

from __future__ import annotations

import shlex

PYTHON_FLAGS = ("-I", "-B", "-u", "-E", "-s", "-S", "-O", "-OO", "-b", "-bb", "-q", "-v")  # may stand before -m pytest
PYTHON_VALUED = ("-X", "-W")


def is_pytest_command(command: str) -> bool:
    """Whether a suite's command, as the stack declares it, is pytest in the environment:
    ``python[3] [flags] -m pytest ...`` or a bare ``pytest`` (found in the environment, never
    a path the stack names). Anything else runs whatever the stack says and needs --trust."""
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if not words:
        return False
    if words[0] in ("pytest", "py.test"):
        return True
    if words[0] not in ("python", "python3"):
        return False
    i = 1
    while i < len(words):
        if words[i] in PYTHON_FLAGS:
            i += 1
        elif words[i] in PYTHON_VALUED:
            i += 2
        else:
            break
    return words[i : i + 2] == ["-m", "pytest"]


def what_it_runs(suites: list, components: dict, env: dict | None = None) -> dict[str, list[dict]]:
    """The suite commands and build environment variables a stack declares, for `check`:
    ``suites`` as verify.suite entries (name, command), ``components`` name -> component
    (build_env), ``env`` the variables the stack bakes into the image and the venv's activation."""
    return {
        "suites": [{"name": s.name, "command": s.command, "pytest": is_pytest_command(s.command)} for s in suites],
        "build_env": [{"component": name, "variable": key, "value": value}
                      for name, component in components.items() for key, value in (component.build_env or {}).items()],
        "image_env": [{"variable": key, "value": value} for key, value in (env or {}).items()],
    }

"""What a stack asks to run on the machine that verifies or builds it, and which of it is
pytest (runs without --trust). Pure: used by `check` to show it and by verify to refuse it.

Also the one list of environment variables that make a program load or run code
(code_variables.toml, a reason per entry), shared by a component's build_env and the stack's
[env], with the names that say a value is a credential and those the activation keeps to itself.
"""

from __future__ import annotations

import re
import shlex
import sys
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only: tomllib is in the standard library from 3.11
    import tomli as tomllib

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
    (build_env), ``env`` the variables the stack bakes into the image and the venv's activation,
    each with ``runs``: why it loads or runs code (allowed by name in [env] allow), else None."""
    return {
        "suites": [{"name": s.name, "command": s.command, "pytest": is_pytest_command(s.command)} for s in suites],
        "build_env": [
            {"component": name, "variable": key, "value": value}
            for name, component in components.items()
            for key, value in (component.build_env or {}).items()
        ],
        "image_env": [{"variable": key, "value": value, "runs": runs_code(key)} for key, value in (env or {}).items()],
    }


VARIABLES = Path(__file__).with_name("code_variables.toml")


@cache
def _variables() -> dict[str, tuple[tuple[str, str], ...]]:
    data = tomllib.loads(VARIABLES.read_text(encoding="utf-8"))
    return {kind: tuple((e["pattern"], e["reason"]) for e in data[kind]) for kind in ("runs", "credential", "reserved")}


def _reason(kind: str, name: str) -> str | None:
    upper = name.upper()
    return next((reason for pattern, reason in _variables()[kind] if fnmatchcase(upper, pattern)), None)


def runs_code(name: str) -> str | None:
    """Why setting ``name`` makes a program load or run other code, or trust or install from
    elsewhere (LD_PRELOAD, PROMPT_COMMAND, OPENSSL_CONF, NCCL_NET_PLUGIN, ...); None when it does not."""
    return _reason("runs", name)


def credential_name(name: str) -> str | None:
    """What credential ``name`` says its value is (a password, a token, a key); None otherwise."""
    return _reason("credential", name)


def reserved_name(name: str) -> str | None:
    """Why the venv's activation keeps ``name`` to itself (its saved values); None otherwise."""
    return _reason("reserved", name)


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def holds_userinfo(value: str) -> bool:
    """Whether any word of ``value`` is a URL or host with 'user:password@' (or 'token@' after a
    scheme): 'https://u:p@host', 'u:p@proxy:3128' with no scheme, 'a,https://t@h' in a list."""
    for word in re.split(r"[\s,;=]+", value):
        rest = _SCHEME.sub("", word)
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if "@" in authority and (rest != word or ":" in authority.rpartition("@")[0]):
            return True
    return False

"""The environment under test: its interpreter, and running standalone probe scripts in it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from trainstack import proc
from trainstack.errors import UsageError

ASK = (
    "import json, sys, sysconfig; p = sysconfig.get_paths(); print(json.dumps({'prefix': sys.prefix, "
    "'base_prefix': getattr(sys, 'base_prefix', sys.prefix), 'version': list(sys.version_info[:3]), "
    "'site': sorted({p['purelib'], p['platlib']})}))"
)


@dataclass(frozen=True)
class Target:
    python: Path  # as given (a venv's bin/python is a symlink; keep it so the venv applies)
    prefix: Path  # sys.prefix of that interpreter
    version: tuple[int, int, int]
    site: tuple[Path, ...] = ()  # its purelib and platlib directories
    is_venv: bool = False

    def library_roots(self) -> list[Path]:
        """What the link check walks: a whole venv, or only site-packages of a system Python."""
        if self.is_venv:
            return [self.prefix]
        return [p for p in self.site if p.is_dir()]

    @property
    def bin_dir(self) -> Path:
        return self.python.parent

    def env(self) -> dict[str, str]:
        """Environment for commands run 'inside' the target: its bin first on PATH."""
        path = f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        extra = {"PATH": path}
        if self.is_venv:
            extra["VIRTUAL_ENV"] = str(self.prefix)
        return extra


def open_target(python: Path) -> Target:
    """Check that ``python`` is a working Python interpreter; UsageError in one line if not."""
    python = Path(python)
    if not python.exists() and os.sep not in str(python):  # a command name: the one on PATH, as a shell would run it
        found = shutil.which(str(python))
        python = Path(found) if found else python
    if not python.exists():
        raise UsageError(f"{python}: no such file", hint="give the path of a python executable, e.g. VENV/bin/python, or a name on PATH")
    if python.is_dir() or not os.access(python, os.X_OK):
        raise UsageError(f"{python}: not an executable file", hint="give the path of a python executable")
    try:
        result = proc.run([python.absolute(), "-I", "-c", ASK], echo=False, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"{python}: is not a Python interpreter ({exc})") from None
    facts = last_json(result.stdout) if result.ok else None
    if not isinstance(facts, dict) or "prefix" not in facts:
        last = (result.stderr.strip().splitlines() or [""])[-1]
        why = last[:200] if "Error" in last else f"'{python} -I -c ...' exited {result.returncode}"
        raise UsageError(f"{python}: is not a working Python interpreter ({why})")
    return Target(
        python.absolute(),
        Path(facts["prefix"]),
        tuple(facts["version"]),
        tuple(Path(p) for p in facts.get("site", [])),
        facts["prefix"] != facts.get("base_prefix", facts["prefix"]),
    )


def probe_path(name: str) -> Path:
    return Path(str(resources.files("trainstack.verify.probes").joinpath(name)))


def run_probe(
    target: Target,
    script: str,
    args: list[str] | None = None,
    *,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> tuple[dict | list | None, str]:
    """Run a probe script in the target, with ``env`` over the target's environment;
    (its JSON or None, a one-line reason when None)."""
    argv = [str(target.python), "-I", str(probe_path(script)), *(args or [])]
    try:
        result = proc.run(argv, echo=False, timeout=timeout, env={**target.env(), **(env or {})})
    except subprocess.TimeoutExpired:
        return None, f"{script} timed out after {timeout:.0f} s"
    data = last_json(result.stdout)
    if isinstance(data, (dict, list)):
        return data, ""
    return None, _crash_reason(result.returncode, result.stderr)


def _crash_reason(code: int, stderr: str) -> str:
    if code < 0:
        return f"the interpreter was killed by signal {-code}"
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"exit {code}: {lines[-1][:300]}" if lines else f"exit {code} without output"


def last_json(stdout: str) -> object:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None

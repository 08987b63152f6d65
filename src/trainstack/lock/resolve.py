"""The uv edge: one `uv pip compile` per request, and uv's failures as one line each."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainstack import grammar, proc
from trainstack.errors import LockError, NetworkError
from trainstack.indexauth import name_indexes, uv_index_options
from trainstack.lock.requests import Request
from trainstack.redact import redact, strip_userinfo
from trainstack.retry import TransientFailure, with_retries

# uv's own retries would multiply ours; trainstack.retry owns the backoff.
UV_ENV = {"UV_HTTP_RETRIES": "0", "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}

_NETWORK = re.compile(
    r"Failed to fetch|error sending request|Connection refused|tcp connect error|dns error|timed out|"
    r"status server error|HTTP status client error \(40[38]|operation timed out|Could not connect|"
    r"failed to lookup address",
    re.IGNORECASE,
)
_URL = re.compile(r"(https?|file)://[^\s`'\"()]+")


@dataclass(frozen=True)
class Compiled:
    text: str  # the lock file uv wrote
    seconds: float


def uv_version() -> str:
    result = proc.run(["uv", "--version"], echo=False)
    return result.stdout.split()[1] if result.ok else "unknown"


def compile_request(
    request: Request,
    *,
    previous: Path | None,
    constraints: Path | None,
    upgrade: Sequence[str],
    header: str,
    component_names: Sequence[str],
    attempts: int = 4,
) -> Compiled:
    """Resolve ``request``; start from ``previous`` (uv keeps its pins unless told to upgrade).

    Network failures are retried with backoff, then NetworkError names the index; a
    resolution failure becomes a LockError naming the components involved.
    """
    check_request(request)
    with tempfile.TemporaryDirectory(prefix="trainstack-lock-") as tmp:
        work = Path(tmp)
        argv = _argv(request, work, previous, constraints, upgrade, header)
        # the indexes by name, their credentials (if any) only in uv's environment
        index_argv, index_env = uv_index_options(request.index_url, request.extra_index_urls, os.environ)
        argv += index_argv

        def step() -> Compiled:
            result = proc.run(argv, env={**UV_ENV, **index_env}, cwd=work, echo=False)  # shown with -v
            if result.ok:
                text = (work / "out.txt").read_text(encoding="utf-8")
                return Compiled(without_credentials(text), result.seconds)
            message = redact(result.stderr.strip() or result.stdout.strip())
            if _OFFLINE_MISS in message or _NOT_CACHED.search(message):
                raise NetworkError(_offline_line(message, request), hint=_OFFLINE_HINT)
            if _NETWORK.search(message):
                raise TransientFailure(_network_line(message, request))
            raise LockError(condense(message, component_names), hint=_credentials_hint(message, request))

        return with_retries(step, what=f"resolution against {', '.join(request.indexes)}", attempts=attempts)


_NO_AUTH = re.compile(r"lack of valid authentication credentials|401 Unauthorized|403 Forbidden")


def _credentials_hint(message: str, request: Request) -> str | None:
    """Which variables carry the credentials, when an index refused uv for want of them."""
    if not _NO_AUTH.search(message):
        return None
    urls = [m.group(0) for m in _URL.finditer(message)]
    named = name_indexes(request.indexes)
    index = next((i for i in named for u in urls if u.startswith(i.url.rstrip("/"))), named[0])
    return f"index {index.url} asks for credentials: set {index.env_prefix}_USERNAME and {index.env_prefix}_PASSWORD in the environment"


def check_request(request: Request) -> None:
    """Every line uv will read is a requirement by name (never an option, a URL or a directory to
    build) and every index a URL: checked here again, whatever built the stack."""
    try:
        for line in (*request.requirements, *(r for item in request.metadata for r in item.requires_dist)):
            grammar.requirement(line)
        for item in request.metadata:
            grammar.pep508_name(item.name)
            grammar.no_controls(item.version)
        for url in (request.index_url, *request.extra_index_urls, *request.find_links):
            if url is not None:
                grammar.index_url(strip_userinfo(url))
        grammar.no_controls(request.python)
        grammar.no_controls(request.platform)
    except ValueError as exc:
        raise LockError(f"refusing to resolve: {exc}") from None


def _argv(request: Request, work: Path, previous: Path | None, constraints: Path | None, upgrade: Sequence[str], header: str) -> list[str]:
    (work / "requirements.in").write_text("".join(f"{line}\n" for line in request.requirements), encoding="utf-8")
    if previous is not None and previous.is_file():
        shutil.copyfile(previous, work / "out.txt")
    argv = [
        "uv",
        "pip",
        "compile",
        "requirements.in",
        "-o",
        "out.txt",
        "--quiet",
        "--python-version",
        request.python,
        "--python-platform",
        request.platform,
        "--generate-hashes",
        "--custom-compile-command",
        header,
        # the indexes go into the file, so `uv pip sync`/`pip install -r` need nothing else
        "--emit-index-url",
        "--emit-find-links",
    ]
    if request.metadata:
        (work / "uv.toml").write_text(_metadata_toml(request), encoding="utf-8")
        argv += ["--config-file", "uv.toml"]
    else:
        argv.append("--no-config")
    for url in request.find_links:
        argv += ["--find-links", url]
    if request.prerelease:
        argv += ["--prerelease", "allow"]
    if constraints is not None:
        shutil.copyfile(constraints, work / "constraints.txt")
        argv += ["-c", "constraints.txt"]
    for name in upgrade:
        argv += ["--upgrade-package", name]
    return argv


def without_credentials(lock_text: str) -> str:
    """A lock file's option lines (--index-url, --extra-index-url, --find-links) without user info."""
    return "".join(strip_userinfo(line) if line.startswith("-") else line for line in lock_text.splitlines(keepends=True))


def _metadata_toml(request: Request) -> str:
    blocks = []
    for item in request.metadata:
        requires = ", ".join(_toml_str(r) for r in item.requires_dist)
        blocks.append(
            f"[[dependency-metadata]]\nname = {_toml_str(item.name)}\nversion = {_toml_str(item.version)}\nrequires-dist = [{requires}]\n"
        )
    return "\n".join(blocks)


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# uv's words when it runs offline (UV_OFFLINE, lock --offline) and its cache lacks a page or file
_OFFLINE_MISS = "Network connectivity is disabled"
_NOT_CACHED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*) was not found in the cache")
_OFFLINE_HINT = "lock once where the index is reachable (it fills uv's cache), or point the stack's [index] at a mirror inside the network"


def _offline_line(message: str, request: Request) -> str:
    """What uv, offline, did not find in its cache: a package's index page or a file's URL."""
    package = _NOT_CACHED.search(message)
    urls = [m.group(0).rstrip(".,;:`") for m in _URL.finditer(message)]
    if package:
        missing = f"the index page of {package.group(1)} from {', '.join(request.indexes)}"
    else:
        missing = urls[-1] if urls else f"what {', '.join(request.indexes)} serves"
    return f"offline (--offline or UV_OFFLINE), and uv's cache does not hold {missing} (resolving for Python {request.python})"


def _network_line(message: str, request: Request) -> str:
    urls = [m.group(0) for m in _URL.finditer(message)]
    index = next((i for i in request.indexes for u in urls if u.startswith(i.rstrip("/"))), None)
    cause = _last_cause(message)
    if index is None:
        index = urls[0] if urls else ", ".join(request.indexes)
    return f"index {index} unreachable: {cause}"


def _last_cause(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    causes = [line.removeprefix("cause:").strip() for line in lines if line.startswith("cause:")]
    return causes[-1] if causes else lines[-1].removeprefix("error:").strip()


def condense(message: str, component_names: Sequence[str]) -> str:
    """uv's resolver report as one line, naming the stack's components it involves."""
    explanation = _explanation(message)
    missing = re.search(r"there is no version of ([A-Za-z0-9._-]+)(\S*)", explanation)
    if missing:
        name, spec = missing.group(1), missing.group(2).rstrip(",")
        return f"components.{_match(name, component_names) or name}: no version matches '{spec or '*'}'"
    named = [n for n in component_names if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", explanation)]
    if len(named) >= 2:
        return f"components '{named[0]}' and '{named[1]}' conflict: {explanation}"
    if named:
        return f"components.{named[0]}: {explanation}"
    return f"resolution failed: {explanation}"


def _explanation(message: str) -> str:
    lines = [line.strip() for line in message.splitlines()]
    body = [
        line.removeprefix("cause:").removeprefix("╰─▶").strip()
        for line in lines
        if line and not line.startswith(("error:", "hint:", "warning:"))
    ]
    text = " ".join(body) or message.strip().splitlines()[-1]
    return re.sub(r"\s+", " ", text)


def _match(name: str, component_names: Sequence[str]) -> str | None:
    canon = name.lower().replace("_", "-")
    return next((n for n in component_names if n.lower().replace("_", "-") == canon), None)

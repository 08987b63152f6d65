"""Git sources at lock time: exact pins are recorded without fetching; a repository on
this machine is asked (read-only) to confirm the commit and give its full sha."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from trainstack import grammar, proc
from trainstack.errors import LockError
from trainstack.stackfile.schema import Component

FULL_SHA_LEN = 40


def pin_source(component: Component, stack_dir: Path, where: str) -> str:
    """'git+URL@FULLSHA' for a git component, 'file:///ABS/PATH' for a path component
    (a relative path is relative to the stack file)."""
    if component.path is not None:
        given = Path(component.path.removeprefix("file://"))
        path = (stack_dir / given).resolve()
        if not path.exists():
            raise LockError(f"{where}: components.{grammar.shown(component.name)}.path: {path} does not exist")
        folder = stack_dir.resolve()
        if not given.is_absolute() and path != folder and folder not in path.parents:
            raise LockError(f"{where}: components.{grammar.shown(component.name)}.path: {path} is outside {folder}")
        return path.as_uri()
    if component.git is None or component.commit is None:
        raise LockError(f"{where}: components.{component.name}: neither a git nor a path source")
    try:  # again here: a component built without validation must not reach git as an option
        grammar.git_url(component.git)
        grammar.commit(component.commit)
    except ValueError as exc:
        raise LockError(f"{where}: components.{grammar.shown(component.name)}: {exc}") from None
    local = _local_repo(component.git)
    if local is not None:
        return f"git+{component.git}@{_resolve_local(local, component, where)}"
    if len(component.commit) != FULL_SHA_LEN:
        raise LockError(
            f"{where}: components.{component.name}.commit: '{component.commit}' is short; "
            f"a remote git source is locked without fetching, so give the full 40-hex sha"
        )
    return f"git+{component.git}@{component.commit}"


def _local_repo(url: str) -> Path | None:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return None


def _resolve_local(repo: Path, component: Component, where: str) -> str:
    argv = ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", f"{component.commit}^{{commit}}"]
    result = proc.run(argv, echo=False)
    if not result.ok:
        raise LockError(f"{where}: components.{component.name}.commit: '{component.commit}' is not a commit of {component.git}")
    return result.stdout.strip()

"""Two releases of examples/stacks/cpu-minimal.toml locked by real uv, which the release tests
copy into their own folders (the ``locked_pair`` fixture of conftest.py locks them once a session)."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainstack.lock.manifest import Manifest, load_manifest, manifest_path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "stacks" / "cpu-minimal.toml"
STACK = "cpu-minimal.toml"
PREVIOUS = Path("previous") / STACK

# The previous release: older exact pins, no hypothesis, and tomli-w, which the current one dropped.
PREVIOUS_COMPONENTS = '''[components]
numpy = "==2.2.6"
pytest = "==8.4.0"
tomli-w = "==1.1.0"
'''


def previous_stack_text(text: str) -> str:
    head, rest = text.split("[components]\n", 1)
    _, tail = rest.split("\n[matrix]", 1)
    return head.replace('release = "2026.12.0"', 'release = "2026.11.0"') + PREVIOUS_COMPONENTS + "\n[matrix]" + tail


def lock_pair(root: Path) -> None:
    """The example stack and a previous release of it in ``root``, both locked by uv."""
    from trainstack.lock import lock_stack

    shutil.copy(EXAMPLE, root / STACK)
    (root / PREVIOUS).parent.mkdir()
    (root / PREVIOUS).write_text(previous_stack_text(EXAMPLE.read_text()))
    lock_stack(root / PREVIOUS)
    lock_stack(root / STACK)


def copy_pair(locked: Path, target: Path) -> tuple[Manifest, Manifest]:
    """Copy the locked pair into ``target``; (previous, current) manifests."""
    shutil.copytree(locked, target, dirs_exist_ok=True)
    return load_manifest(manifest_path(target / PREVIOUS)), load_manifest(manifest_path(target / STACK))

"""Two releases of examples/stacks/cpu-minimal.toml locked by real uv, which the release tests
copy into their own folders (the ``locked_pair`` fixture of conftest.py locks them once a session)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trainstack.lock.manifest import Manifest, load_manifest, manifest_path
from trainstack.release.publish import Outcome, make_release

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


def make_project(locked: Path, target: Path) -> Path:
    """The locked pair copied into ``target``, plus fragments and a verify result of the current
    flavour: a project ready for release."""
    _, current = copy_pair(locked, target)
    changes = target / "changes"
    changes.mkdir()
    (changes / "10.highlight.md").write_text("NumPy 2.4.\n")
    (changes / "11.fix.md").write_text("Hashes are kept when a lock is refreshed.\n")
    shutil.copy(EXAMPLE.parent / "changes" / "README.md", changes / "README.md")  # not a fragment
    (slug,) = current.flavours
    results = target / "results" / slug
    results.mkdir(parents=True)
    suite = {"name": "numpy-linalg", "status": "passed", "tests": 12, "failed": [], "known": []}
    verify = {"verdict": "pass", "reasons": [], "gate": {"suites": [suite], "total_failed": 0, "max_failed_tests": 0}}
    (results / "verify.json").write_text(json.dumps(verify))
    return target


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


def slug_of(project: Path) -> str:
    """The one flavour of the current release's lock in ``project``."""
    (slug,) = json.loads(manifest_path(project / STACK).read_text())["flavours"]
    return slug


def release(project: Path, **kwargs) -> Outcome:
    """The release of ``project``'s current stack over its previous one, results and outputs in
    the project's folders."""
    return make_release(project / STACK, manifest_path(project / PREVIOUS), results=project / "results",
                        out=project / "out", drivers=lambda cuda: None, **kwargs)

"""Changelog fragments: ``changes/<id>.<type>.md``, one change per file, consumed by a release.

The type is the file-name suffix before ``.md`` (see model.SECTIONS). A fragment is read
when the notes are made and moved to ``changes/released/<release>/`` only after the
release has been written, so a failed release leaves every fragment in place. Making the
same release again reads the fragments it consumed before as well, so its notes keep them.

A fragment whose whole text is ``none`` says its section has nothing this release (the notes
print "None." there); it cannot stand beside another fragment of the same type.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainstack.errors import SpecError
from trainstack.release.model import SECTIONS, Fragment

RELEASED_DIR = "released"
NONE_MARKER = "none"  # a fragment's whole text: its section has nothing this release
IGNORED = {"README.md"}


def parse_fragment(name: str, text: str, where: Path) -> Fragment:
    """One fragment from its file name and text; SpecError naming the file when malformed."""
    stem = name.removesuffix(".md")
    ident, _, kind = stem.rpartition(".")
    accepted = ", ".join(f"<id>.{k}.md" for k in SECTIONS)
    if not ident:
        raise SpecError(f"{where}: a fragment's file name needs an id and a type; accepted: {accepted}")
    if kind not in SECTIONS:
        raise SpecError(f"{where}: unknown fragment type '{kind}' in its file name; accepted: {accepted}")
    body = text.strip()
    if not body:
        raise SpecError(f"{where}: empty fragment; write one change in Markdown, 'none' to say the section "
                        "has nothing this release, or delete the file")
    if body.rstrip(".").lower() == NONE_MARKER:
        return Fragment(name=name, type=kind, text="None.", none=True)  # type: ignore[arg-type]
    return Fragment(name=name, type=kind, text=body)  # type: ignore[arg-type]


def check_none_alone(fragments: list[Fragment], changes: Path) -> None:
    """Refuse a section that says 'none' and also has a change."""
    changes_by_type = {f.type: f for f in reversed(fragments) if not f.none}  # the first change of each type
    for marker in (f for f in fragments if f.none):
        other = changes_by_type.get(marker.type)
        if other is not None:
            raise SpecError(f"{changes / marker.name}: says 'none' for its section ({marker.type}), but "
                            f"{other.name} is a {marker.type} of this release; delete one of them")


def _natural(name: str) -> list[object]:
    """'9.fix.md' before '10.fix.md'."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def fragment_files(changes: Path) -> list[Path]:
    if not changes.is_dir():
        return []
    found = [p for p in changes.iterdir() if p.suffix == ".md" and p.is_file()]
    return sorted((p for p in found if p.name not in IGNORED and not p.name.startswith(".")), key=lambda p: _natural(p.name))


def read_fragments(changes: Path) -> list[Fragment]:
    """Every fragment in ``changes``, validated; the first bad one raises SpecError."""
    fragments = []
    for path in fragment_files(changes):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SpecError(f"{path}: not UTF-8 text; a fragment is a Markdown file") from None
        except OSError as exc:
            raise SpecError(f"{path}: cannot read: {exc.strerror}") from None
        fragments.append(parse_fragment(path.name, text, path))
    return fragments


def released_dir(changes: Path, release: str) -> Path:
    return changes / RELEASED_DIR / release


def release_fragments(changes: Path, release: str) -> list[Fragment]:
    """The fragments of ``release``: those it consumed when it was made before, and the new
    ones in ``changes``, in name order; SpecError when a new one repeats a consumed name."""
    new = read_fragments(changes)
    check_consumable(changes, new, release)
    found = sorted(read_fragments(released_dir(changes, release)) + new, key=lambda f: _natural(f.name))
    check_none_alone(found, changes)
    return found


def check_consumable(changes: Path, fragments: list[Fragment], release: str) -> None:
    """Refuse, before anything is written, a fragment whose name a release already consumed."""
    for fragment in fragments:
        done = released_dir(changes, release) / fragment.name
        if done.exists():
            raise SpecError(f"{changes / fragment.name}: release {release} already consumed a fragment of this name ({done}); rename it")


def consume_fragments(changes: Path, fragments: list[Fragment], release: str) -> Path | None:
    """Move the fragments a release used into ``changes/released/<release>/``; where they
    went, or None when none was left to move (all consumed by an earlier run of the release)."""
    target = released_dir(changes, release)
    waiting = [f for f in fragments if (changes / f.name).is_file()]
    if not waiting:
        return None
    target.mkdir(parents=True, exist_ok=True)
    for fragment in waiting:
        os.replace(changes / fragment.name, target / fragment.name)
    return target

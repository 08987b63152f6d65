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
import stat
from pathlib import Path

from trainstack import grammar
from trainstack.errors import SpecError
from trainstack.fsutil import describe_os_error, read_regular
from trainstack.release.markdown import safe_target
from trainstack.release.schema import SECTIONS, Fragment

RELEASED_DIR = "released"
NONE_MARKER = "none"  # a fragment's whole text: its section has nothing this release
IGNORED = {"README.md"}
FRAGMENT_LIMIT = 64 << 10  # one change, in a few paragraphs at most: 64 KiB


def parse_fragment(name: str, text: str, where: Path) -> Fragment:
    """One fragment from its file name and text; SpecError naming the file when malformed."""
    stem = name.removesuffix(".md")
    ident, _, kind = stem.rpartition(".")
    accepted = ", ".join(f"<id>.{k}.md" for k in SECTIONS)
    if not ident:
        raise SpecError(f"{where}: a fragment's file name needs an id and a type; accepted: {accepted}")
    if kind not in SECTIONS:
        raise SpecError(f"{where}: unknown fragment type '{kind}' in its file name; accepted: {accepted}")
    body = text.replace("\r\n", "\n").strip()
    if not body:
        raise SpecError(
            f"{where}: empty fragment; write one change in Markdown, 'none' to say the section has nothing this release, or delete the file"
        )
    if body.rstrip(".").lower() == NONE_MARKER:
        return Fragment(name=name, type=kind, text="None.", none=True)  # type: ignore[arg-type]  # kind is one of SECTIONS (checked above), the FragmentType literal's words
    found = grammar.TEXT_CONTROL.search(body)
    if found:
        line = body.count("\n", 0, found.start()) + 1 + _leading_lines(text)
        raise SpecError(
            f"{where}:{line}: holds the character {grammar.shown(found.group(0))}; a fragment is Markdown "
            "text (newlines and tabs, but no other control, invisible or bidirectional characters)"
        )
    _check_markdown(body, f"{where}", _leading_lines(text))
    return Fragment(name=name, type=kind, text=body)  # type: ignore[arg-type]  # kind is one of SECTIONS (checked above), the FragmentType literal's words


def _leading_lines(text: str) -> int:
    """Lines stripped before a fragment's text: to name lines of the file, not of the text."""
    stripped = text.replace("\r\n", "\n")
    return stripped[: len(stripped) - len(stripped.lstrip())].count("\n")


def _check_markdown(body: str, where: str, offset: int) -> None:
    """A fragment is prose for one section of the notes: no heading (the notes make them), no
    raw HTML, and links only to http(s) pages or relative paths."""
    from markdown_it import MarkdownIt

    class EveryLink(MarkdownIt):
        def validateLink(self, url: str) -> bool:  # markdown-it's name
            return True  # every link as a token here, to be checked below

    md = EveryLink("commonmark", {"html": True})
    line = offset + 1
    for token in md.parse(body):
        if token.map:
            line = offset + token.map[0] + 1
        if token.type == "heading_open":
            raise SpecError(
                f"{where}:{line}: a heading; a fragment is one change for its section (the notes make "
                "the headings): write it as a paragraph or a list"
            )
        for part in [token, *(token.children or [])]:
            if part.type in ("html_block", "html_inline"):
                raise SpecError(
                    f"{where}:{line}: raw HTML '{grammar.shown(part.content.strip())}'; write Markdown (text, lists, links, code)"
                )
            target = part.attrs.get("href", part.attrs.get("src")) if part.type in ("link_open", "image") else None
            if target is not None and safe_target(str(target)) is None:
                raise SpecError(
                    f"{where}:{line}: the link '{grammar.shown(target)}' is not one the notes hold; "
                    "accepted: an http(s) URL or a relative path"
                )


def check_none_alone(fragments: list[Fragment], changes: Path) -> None:
    """Refuse a section that says 'none' and also has a change."""
    changes_by_type = {f.type: f for f in reversed(fragments) if not f.none}  # the first change of each type
    for marker in (f for f in fragments if f.none):
        other = changes_by_type.get(marker.type)
        if other is not None:
            raise SpecError(
                f"{changes / marker.name}: says 'none' for its section ({marker.type}), but "
                f"{other.name} is a {marker.type} of this release; delete one of them"
            )


def _natural(name: str) -> list[object]:
    """'9.fix.md' before '10.fix.md'."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def fragment_files(changes: Path) -> list[Path]:
    """Every ``*.md`` entry of ``changes`` but its README and hidden files: links and special
    files included, so that reading refuses them by name rather than skipping them unseen."""
    if not changes.is_dir():
        return []
    found = [p for p in changes.iterdir() if p.suffix == ".md" and (p.is_symlink() or not p.is_dir())]
    return sorted((p for p in found if p.name not in IGNORED and not p.name.startswith(".")), key=lambda p: _natural(p.name))


def read_fragments(changes: Path, inside: Path | None = None) -> list[Fragment]:
    """Every fragment in ``changes``, validated; the first bad one raises SpecError. A fragment
    is a regular file in ``inside`` (default ``changes``), never a link: it is moved later."""
    fragments = []
    for path in fragment_files(changes):
        try:
            data = read_regular(path, "fragment", inside=inside or changes, folder_name="changes folder", links=False, limit=FRAGMENT_LIMIT)
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SpecError(f"{path}: not UTF-8 text; a fragment is a Markdown file") from None
        except OSError as exc:
            raise SpecError(f"{path}: cannot read: {describe_os_error(exc)}") from None
        fragments.append(parse_fragment(path.name, text, path))
    return fragments


def released_dir(changes: Path, release: str) -> Path:
    return changes / RELEASED_DIR / release


def release_fragments(changes: Path, release: str) -> list[Fragment]:
    """The fragments of ``release``: those it consumed when it was made before, and the new
    ones in ``changes``, in name order; SpecError when a new one repeats a consumed name."""
    new = read_fragments(changes)
    check_consumable(changes, new, release)
    found = sorted(read_fragments(released_dir(changes, release), changes) + new, key=lambda f: _natural(f.name))
    check_none_alone(found, changes)
    return found


def _check_released_folders(changes: Path, release: str) -> None:
    """``released/`` and ``released/<release>/`` are real folders of ``changes`` where they exist:
    a link there would move fragments out of the repository."""
    for folder in (changes / RELEASED_DIR, released_dir(changes, release)):
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise SpecError(
                f"{folder}: is not a folder of {changes} (a symbolic link or a file); "
                "released fragments are moved into a folder of the changes folder"
            )


def check_consumable(changes: Path, fragments: list[Fragment], release: str) -> None:
    """Refuse, before anything is written, a fragment whose name a release already consumed, or
    folders to move fragments into that are not the changes folder's own."""
    if fragments:
        _check_released_folders(changes, release)
    for fragment in fragments:
        done = released_dir(changes, release) / fragment.name
        if done.exists():
            raise SpecError(f"{changes / fragment.name}: release {release} already consumed a fragment of this name ({done}); rename it")


def consume_fragments(changes: Path, fragments: list[Fragment], release: str) -> Path | None:
    """Move the fragments a release used into ``changes/released/<release>/``; where they
    went, or None when none was left to move (all consumed by an earlier run of the release).
    Only regular files move, and only into real folders of ``changes`` (no link on the way)."""
    target = released_dir(changes, release)
    waiting = [f for f in fragments if _plain_file(changes / f.name)]
    if not waiting:
        return None
    _check_released_folders(changes, release)
    for folder in (changes / RELEASED_DIR, target):
        folder.mkdir(exist_ok=True)
    for fragment in waiting:
        os.replace(changes / fragment.name, target / fragment.name)
    return target


def _plain_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False

"""What changed between two lock manifests of one stack. Pure: manifests in, Updates out."""

from __future__ import annotations

import re
from collections.abc import Collection
from urllib.parse import unquote, urlparse

from packaging.version import InvalidVersion, Version

from trainstack.lock.manifest import LockedFlavour, Manifest
from trainstack.release.model import Change, ComponentVersions, Updates

_GIT_SHA = re.compile(r"@([0-9a-f]{7,40})$")


def shown_version(flavour: LockedFlavour, name: str) -> str | None:
    """The version a reader recognises: a git source's commit shortened to 7 hex, a path
    source's folder, else the resolved version."""
    source = flavour.sources.get(name)
    if source and source.startswith("git+"):
        match = _GIT_SHA.search(source)
        if match:
            return match.group(1)[:7]
        return source.removeprefix("git+")
    if source and source.startswith("file:"):
        return "path " + unquote(urlparse(source).path)
    return flavour.packages.get(name)


def names(flavour: LockedFlavour) -> set[str]:
    """Every package of a flavour: those uv resolved and the git and path sources beside them."""
    return set(flavour.packages) | set(flavour.sources)


def direction(old: str | None, new: str | None) -> str:
    """'upgraded' or 'downgraded' between two versions; 'changed' when they don't compare
    (commits, paths)."""
    if old is None or new is None:
        return "changed"
    try:
        before, after = Version(old), Version(new)
    except InvalidVersion:
        return "changed"
    return "upgraded" if after > before else "downgraded" if after < before else "changed"


def flavour_changes(old: LockedFlavour, new: LockedFlavour, components: Collection[str]) -> list[Change]:
    """Every package that changed, appeared or disappeared; components first, then by name."""
    changes = []
    for name in sorted(names(old) | names(new)):
        before, after = shown_version(old, name), shown_version(new, name)
        if before != after:
            changes.append(Change(name=name, old=before, new=after, component=name in components,
                                  direction=direction(before, after)))
    return sorted(changes, key=lambda c: (not c.component, c.name))


def diff_manifests(old: Manifest, new: Manifest, components: Collection[str]) -> Updates:
    """Changes common to every flavour in both manifests once, the rest per flavour."""
    shared = [slug for slug in new.flavours if slug in old.flavours]
    per_flavour = {slug: flavour_changes(old.flavours[slug], new.flavours[slug], components) for slug in shared}
    common = _in_all(per_flavour.values())
    return Updates(
        common=common,
        per_flavour={slug: [c for c in changes if c not in common] for slug, changes in sorted(per_flavour.items())},
        added_flavours=sorted(set(new.flavours) - set(old.flavours)),
        removed_flavours=sorted(set(old.flavours) - set(new.flavours)),
    )


def first_release(new: Manifest, components: Collection[str]) -> Updates:
    """A stack's first release: every package of every flavour added, those common to every
    flavour once; no flavour is listed as new (all are)."""
    per_flavour = {slug: sorted((Change(name=name, new=shown_version(flavour, name), component=name in components)
                                 for name in names(flavour)), key=lambda c: (not c.component, c.name))
                   for slug, flavour in new.flavours.items()}
    common = _in_all(per_flavour.values())
    return Updates(
        common=common,
        per_flavour={slug: [c for c in changes if c not in common] for slug, changes in sorted(per_flavour.items())},
    )


def _in_all(lists: Collection[list[Change]]) -> list[Change]:
    if not lists:
        return []
    first, *rest = lists
    return [c for c in first if all(c in other for other in rest)]


def component_versions(manifest: Manifest, components: Collection[str]) -> ComponentVersions:
    """The version table of the declared components; flavours with identical versions share a column."""
    shown = sorted(n for n in components if any(n in names(f) for f in manifest.flavours.values()))
    groups: dict[tuple[str, ...], list[str]] = {}
    for slug, flavour in sorted(manifest.flavours.items()):
        versions = tuple(shown_version(flavour, name) or "" for name in shown)
        groups.setdefault(versions, []).append(slug)
    columns = list(groups.items())
    return ComponentVersions(
        columns=[slugs for _, slugs in columns],
        rows={name: [versions[i] for versions, _ in columns] for i, name in enumerate(shown)},
    )

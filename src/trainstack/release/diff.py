"""What changed between two lock manifests of one stack. Pure: manifests in, Updates out."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Literal
from urllib.parse import unquote, urlparse

from packaging.version import InvalidVersion, Version

from trainstack.lock.manifest import LockedFlavour, Manifest
from trainstack.release.schema import Change, ComponentVersions, Updates

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


def direction(old: str | None, new: str | None) -> Literal["changed", "upgraded", "downgraded"]:
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
            changes.append(Change(name=name, old=before, new=after, component=name in components, direction=direction(before, after)))
    return sorted(changes, key=lambda c: (not c.component, c.name))


_AXES = (("cuda", "CUDA"), ("os", "OS"), ("python", "Python"))


def moves(old: LockedFlavour, new: LockedFlavour) -> list[str]:
    """What moved between two matched flavours: 'CUDA 12.4 → 12.6', 'OS ubuntu22.04 → ubuntu24.04'."""
    return [f"{label} {getattr(old, axis)} → {getattr(new, axis)}" for axis, label in _AXES if getattr(old, axis) != getattr(new, axis)]


def _distance(old: LockedFlavour, new: LockedFlavour) -> tuple[int, float]:
    """How far two flavours are apart: the number of axes that moved, then how far the CUDA and
    Python versions moved (a move to the nearest release before one further away)."""
    far = 0.0
    for axis in ("cuda", "python"):
        a, b = getattr(old, axis), getattr(new, axis)
        if a != b:
            try:
                far += abs(
                    float(Version(a).release[0] * 100 + Version(a).release[-1])
                    - float(Version(b).release[0] * 100 + Version(b).release[-1])
                )
            except (InvalidVersion, IndexError):
                far += 1000.0  # 'cpu' against a CUDA release: as far as anything
    return sum(getattr(old, axis) != getattr(new, axis) for axis, _ in _AXES), far


MAX_PAIRS = 40_000  # renamed flavours weighed against each other at most (200 x 200)


def match_flavours(old: Manifest, new: Manifest) -> dict[str, str]:
    """New slug -> old slug for flavours that carry on under another name: the same slug first;
        then, among the rest, one-to-one, the same channel and the nearest other axes (a CUDA, OS or
        Python move). Beyond MAX_PAIRS candidate pairs no renamed flavour is matched (each is listed
    as new or dropped), so a manifest of any size is diffed in time linear in it."""
    matched = {slug: slug for slug in new.flavours if slug in old.flavours}
    left_old = [s for s in sorted(old.flavours) if s not in matched]
    left_new = [s for s in sorted(new.flavours) if s not in matched]
    if len(left_old) * len(left_new) > MAX_PAIRS:  # no real matrix comes near: a hostile manifest's size
        return matched
    pairs = sorted(
        (_distance(old.flavours[o], new.flavours[n]), n, o)
        for n in left_new
        for o in left_old
        if old.flavours[o].channel == new.flavours[n].channel and (old.flavours[o].cuda == "cpu") == (new.flavours[n].cuda == "cpu")
    )
    taken: set[str] = set()
    for _, n, o in pairs:
        if n not in matched and o not in taken:
            matched[n] = o
            taken.add(o)
    return matched


def diff_manifests(old: Manifest, new: Manifest, components: Collection[str]) -> Updates:
    """Changes common to every flavour in both manifests once, the rest per flavour; a flavour
    that moved to another CUDA, OS or Python release is diffed against the one it follows, and
    the move itself is stated."""
    matched = match_flavours(old, new)
    per_flavour = {slug: flavour_changes(old.flavours[before], new.flavours[slug], components) for slug, before in matched.items()}
    common = _in_all(per_flavour.values())
    return Updates(
        common=common,
        per_flavour={slug: [c for c in changes if c not in common] for slug, changes in sorted(per_flavour.items())},
        added_flavours=sorted(set(new.flavours) - set(matched)),
        removed_flavours=sorted(set(old.flavours) - set(matched.values())),
        followed={slug: before for slug, before in sorted(matched.items()) if slug != before},
        moves={slug: moves(old.flavours[before], new.flavours[slug]) for slug, before in sorted(matched.items()) if slug != before},
        settings={
            slug: settings_changes(old.flavours[before], new.flavours[slug])
            for slug, before in sorted(matched.items())
            if settings_changes(old.flavours[before], new.flavours[slug])
        },
        image=Change(name="image", old=old.image, new=new.image) if old.image != new.image else None,
    )


def settings_changes(old: LockedFlavour, new: LockedFlavour) -> list[Change]:
    """The base image and the build settings (environment, DS_BUILD flags, compiler cache, jobs)
    that changed; a manifest that did not record them (written before they were) shows none."""
    if not (old.base_image and new.base_image):
        return []
    before = {"base image": old.base_image, **old.build_settings}
    after = {"base image": new.base_image, **new.build_settings}
    return [
        Change(name=name, old=_setting(name, before.get(name)), new=_setting(name, after.get(name)))
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    ]


_JOBS = re.compile(r"([0-9]{1,6})/([0-9]{1,6})")


def _setting(name: str, value: str | None) -> str | None:
    """A setting as a reader takes it: a job budget recorded as 'divisor/cap' ('3/64') is no
    fraction but 'CPUs / 3, at most 64 jobs'."""
    match = _JOBS.fullmatch(value or "") if name.endswith(".jobs") else None
    return f"CPUs / {match.group(1)}, at most {match.group(2)} jobs" if match else value


def first_release(new: Manifest, components: Collection[str]) -> Updates:
    """A stack's first release: every package of every flavour added, those common to every
    flavour once; no flavour is listed as new (all are)."""
    per_flavour = {
        slug: sorted(
            (Change(name=name, new=shown_version(flavour, name), component=name in components) for name in names(flavour)),
            key=lambda c: (not c.component, c.name),
        )
        for slug, flavour in new.flavours.items()
    }
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

"""Image tags from [stack] tag, a template of flavour fields and components' locked versions
('{release}-cuda{cuda}-torch{torch}-py{python}'): each result an OCI tag, one per flavour. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from trainstack import grammar
from trainstack.stackfile.matrix import Flavour
from trainstack.stackfile.schema import TAG_AXES, Stack

DEFAULT_TAG = "{release}-{slug}"  # one tag per flavour, as before templates


def tag_template(stack: Stack) -> str:
    return stack.stack.tag or DEFAULT_TAG


def axes_of(stack: Stack, flavour: Flavour) -> dict[str, str]:
    return {"name": stack.stack.name, "release": stack.stack.release, "slug": flavour.slug, **flavour.as_dict()}


def expand_tag(template: str, axes: Mapping[str, str], packages: Mapping[str, str]) -> str:
    """The tag of one flavour: ``axes`` (TAG_AXES) and ``packages`` (canonical name -> locked
    version; a version's public part, since '+' is not a tag character). ValueError naming the
    field that cannot be filled, or the result that is not an OCI tag."""
    values: dict[str, str] = {}
    for field in grammar.tag_template_fields(template):
        if field in TAG_AXES:
            values[field] = axes[field]
            continue
        version = packages.get(canonicalize_name(field))
        if version is None:
            raise ValueError(f"'{{{field}}}': {canonicalize_name(field)} is not in flavour {axes['slug']}'s lock")
        try:
            values[field] = Version(version).public
        except InvalidVersion:
            values[field] = version
    return grammar.image_tag(template.format(**values))


def flavour_tags(template: str, flavours: Mapping[str, tuple[Mapping[str, str], Mapping[str, str]]]) -> dict[str, str]:
    """slug -> tag for every flavour (slug -> (axes, packages)); ValueError when one cannot be
    made or two flavours would share one (the second would overwrite the first's image)."""
    tags: dict[str, str] = {}
    seen: dict[str, str] = {}
    for slug, (axes, packages) in flavours.items():
        tag = expand_tag(template, axes, packages)
        if tag in seen:
            raise ValueError(
                f"flavours {seen[tag]} and {slug} both get the tag '{tag}' (accepted: a template whose "
                "fields tell every flavour apart, such as one with '{slug}')"
            )
        seen[tag] = slug
        tags[slug] = tag
    return tags


def pinned_versions(stack: Stack) -> dict[str, str] | None:
    """Component -> exact version, for a check before locking; None when the template names a
    component that is not pinned to one version (then only the lock tells its tag)."""
    found = {}
    for field in grammar.tag_template_fields(tag_template(stack)):
        if field in TAG_AXES:
            continue
        component = next((c for c in stack.components.values() if c.key == canonicalize_name(field)), None)
        if component is None or component.pinned_version is None or component.when is not None:
            return None
        found[component.key] = component.pinned_version
    return found

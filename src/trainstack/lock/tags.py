"""Each locked flavour's image reference, registry/image:TAG, its tag made from [stack] tag with
the versions the lock resolved (trainstack.stackfile.tags). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trainstack.errors import SpecError
from trainstack.lock.manifest import LockedFlavour
from trainstack.stackfile.load import locate
from trainstack.stackfile.schema import Stack
from trainstack.stackfile.tags import flavour_tags, tag_template


def image_refs(template: str, *, image: str, name: str, release: str, flavours: Mapping[str, LockedFlavour]) -> dict[str, str]:
    """slug -> 'image:tag'; ValueError when a tag cannot be made or two flavours share one."""
    axes = {
        slug: (
            {
                "name": name,
                "release": release,
                "slug": slug,
                "cuda": f.cuda,
                "os": f.os,
                "python": f.python,
                "channel": f.channel,
                "arch": f.arch,
            },
            f.packages,
        )
        for slug, f in flavours.items()
    }
    return {slug: f"{image}:{tag}" for slug, tag in flavour_tags(template, axes).items()}


def stack_image_refs(stack: Stack, flavours: Mapping[str, LockedFlavour], stack_path: Path | None = None) -> dict[str, str]:
    """The images a build of the stack's locked ``flavours`` (slug -> its lock entry) makes;
    SpecError naming the stack file's [stack] tag line when the template cannot make one of them."""
    try:
        return image_refs(
            tag_template(stack), image=stack.stack.image_ref, name=stack.stack.name, release=stack.stack.release, flavours=flavours
        )
    except ValueError as exc:
        where = "stack"
        if stack_path is not None:
            try:
                line = locate(stack_path.read_text(encoding="utf-8"), ("stack", "tag"))
            except (OSError, UnicodeDecodeError):
                line = None
            where = f"{stack_path}:{line}" if line else str(stack_path)
        raise SpecError(f"{where}: stack.tag: {exc}") from None

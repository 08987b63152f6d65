"""Flavours: the cells of the stack's matrix, after excludes and includes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from trainstack.errors import SpecError, UsageError
from trainstack.stackfile.bases import base_key
from trainstack.stackfile.schema import Component, Stack


@dataclass(frozen=True, order=True)
class Flavour:
    cuda: str  # "12.8" or "cpu"
    os: str  # "ubuntu24.04"
    python: str  # "3.12"
    channel: str  # "release" | "nightly"
    arch: str = "x86_64"  # the machine: "x86_64" | "aarch64"

    @property
    def cuda_tag(self) -> str:
        """'cu128' or 'cpu': the variant name PyTorch's wheel indexes use."""
        return "cpu" if self.cuda == "cpu" else "cu" + self.cuda.replace(".", "")

    @property
    def slug(self) -> str:
        """A name safe for files, image tags and cache keys: cu128-ubuntu2404-py312-release."""
        os_tag = self.os.replace(".", "")
        slug = f"{self.cuda_tag}-{os_tag}-py{self.python.replace('.', '')}-{self.channel}"
        # x86_64 is left out, so the slugs and cache keys of x86_64 flavours stay as they were
        return slug if self.arch == "x86_64" else f"{slug}-{self.arch}"

    def as_dict(self) -> dict[str, Any]:  # each a str; Any, as the Literal fields it fills (arch) take it
        return {"cuda": self.cuda, "os": self.os, "python": self.python, "channel": self.channel, "arch": self.arch}


def expand_flavours(stack: Stack) -> list[Flavour]:
    """Every matrix cell minus the excludes, plus the includes, sorted and unique."""
    m = stack.matrix
    cells = {Flavour(cuda, os_, py, ch, arch) for cuda, os_, py, ch, arch in itertools.product(m.cuda, m.os, m.python, m.channel, m.arch)}
    for rule in m.exclude:
        wanted = rule.model_dump(exclude_none=True)
        cells = {f for f in cells if any(f.as_dict()[k] != v for k, v in wanted.items())}
    cells |= {Flavour(i.cuda, i.os, i.python, i.channel, i.arch) for i in m.include}
    return sorted(cells)


def select_flavour(stack: Stack, name: str | None) -> list[Flavour]:
    """All flavours, or the one whose slug is ``name`` (UsageError with the closest slug). The
    slug may be written with the matrix's own dots: cu126-ubuntu22.04-py3.12-release is
    cu126-ubuntu2204-py312-release."""
    flavours = expand_flavours(stack)
    if name is None:
        return flavours
    for flavour in flavours:
        if name.replace(".", "") == flavour.slug:
            return [flavour]
    import difflib

    slugs = [f.slug for f in flavours]
    close = difflib.get_close_matches(name, slugs, n=1, cutoff=0.5)
    hint = f"perhaps you meant '{close[0]}'?" if close else f"flavours: {', '.join(slugs)}"
    raise UsageError(f"flavour '{name}' is not in stack '{stack.stack.name}'", hint=hint)


def component_applies(component: Component, flavour: Flavour) -> bool:
    """Whether ``component`` is part of ``flavour`` according to its ``when`` filter."""
    when = component.when
    if when is None:
        return True
    if when.channel is not None and when.channel != flavour.channel:
        return False
    if when.os is not None and flavour.os not in when.os:
        return False
    if when.python is not None and Version(flavour.python) not in SpecifierSet(when.python):
        return False
    if when.cuda is not None:
        if flavour.cuda == "cpu":
            return False
        return Version(flavour.cuda) in SpecifierSet(when.cuda)
    return True


def components_for(stack: Stack, flavour: Flavour) -> list[Component]:
    return [c for c in stack.components.values() if component_applies(c, flavour)]


def base_of(stack: Stack, flavour: Flavour) -> tuple[str, str] | None:
    """(its key in [build] base, the image) the flavour builds on (stackfile.bases: the matching
    key naming the most axes); None when no key matches it. SpecError when two keys tie."""
    try:
        key = base_key(stack.build.base, flavour)
    except ValueError as exc:
        raise SpecError(f"build.base: {exc}") from None
    return None if key is None else (key, stack.build.base[key])

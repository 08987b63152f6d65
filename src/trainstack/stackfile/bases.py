"""Which base image a flavour builds on: [build] base, keyed by any axis of the matrix.

    [build]
    base = { "ubuntu24.04" = "docker.io/library/ubuntu:24.04",           # a bare key is an OS
             "cuda=12.6" = "docker.io/nvidia/cuda:12.6.3-devel-ubuntu24.04",
             "os=ubuntu22.04,cuda=12.8" = "docker.io/nvidia/cuda:12.8.1-devel-ubuntu22.04" }

A key is an OS name, or one or more ``axis=value`` joined by commas (axes: os, cuda, python,
arch, channel). A flavour takes the value of the matching key that names the most axes; two
matching keys naming as many axes with different images are refused. Pure."""

from __future__ import annotations

import re
from typing import Protocol

from trainstack import grammar

BASE_AXES = ("os", "cuda", "python", "arch", "channel")
OS_RE = re.compile(r"^[a-z]+[0-9.]*\Z")  # as the matrix's: 'ubuntu24.04', 'debian12'
_VALUES = {
    "os": (OS_RE, "an OS name such as ubuntu24.04 or debian12"),
    "cuda": (re.compile(r"^(cpu|[0-9]{1,2}\.[0-9]{1,2})$"), "a CUDA release such as 12.6, or cpu"),
    "python": (re.compile(r"^3\.[0-9]{1,2}$"), "a Python version such as 3.12"),
    "arch": (re.compile(r"^(x86_64|aarch64)$"), "x86_64 or aarch64"),
    "channel": (re.compile(r"^(release|nightly)$"), "release or nightly"),
}
ACCEPTED = (
    'an OS name ("ubuntu24.04"), or axis=value pairs joined by commas ("cuda=12.6", '
    f'"os=ubuntu22.04,cuda=12.8"; axes: {", ".join(BASE_AXES)})'
)


class Cell(Protocol):
    """A matrix cell's axes, read only (a Flavour is one)."""

    @property
    def os(self) -> str: ...
    @property
    def cuda(self) -> str: ...
    @property
    def python(self) -> str: ...
    @property
    def arch(self) -> str: ...
    @property
    def channel(self) -> str: ...


def parse_key(key: str) -> dict[str, str]:
    """{'os': 'ubuntu22.04'} for 'ubuntu22.04'; {'os': ..., 'cuda': '12.8'} for
    'os=ubuntu22.04,cuda=12.8'. ValueError saying what is accepted."""
    if "=" not in key:
        if not OS_RE.match(key):
            raise ValueError(f"key '{grammar.shown(key)}' is not accepted; a key is {ACCEPTED}")
        return {"os": key}
    selector: dict[str, str] = {}
    for part in key.split(","):
        axis, _, value = (p.strip() for p in part.partition("="))
        if axis not in _VALUES:
            raise ValueError(f"key '{grammar.shown(key)}': unknown axis '{grammar.shown(axis)}'; a key is {ACCEPTED}")
        pattern, wanted = _VALUES[axis]
        if not pattern.match(value):
            raise ValueError(f"key '{grammar.shown(key)}': {axis} '{grammar.shown(value)}' is not {wanted}")
        if axis in selector:
            raise ValueError(f"key '{grammar.shown(key)}' names {axis} twice")
        selector[axis] = value
    return selector


def base_key(bases: dict[str, str], flavour: Cell) -> str | None:
    """The key of ``bases`` the flavour takes (the matching one naming the most axes); None when
    none matches. ValueError when two keys as specific give it different images."""
    selectors = {key: parse_key(key) for key in bases}
    matching = [(len(sel), key) for key, sel in selectors.items() if all(getattr(flavour, axis) == value for axis, value in sel.items())]
    if not matching:
        return None
    most = max(size for size, _ in matching)
    best = sorted(key for size, key in matching if size == most)
    if len({bases[key] for key in best}) > 1:
        raise ValueError(
            f"keys {', '.join(repr(k) for k in best)} all match flavour {flavour_name(flavour)} with "
            "different images; add a key naming more axes for it"
        )
    return best[0]


def flavour_name(flavour: Cell) -> str:
    return f"os={flavour.os},cuda={flavour.cuda},python={flavour.python},arch={flavour.arch},channel={flavour.channel}"

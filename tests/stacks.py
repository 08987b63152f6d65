"""Stack files the tests write, from parts they share."""

from __future__ import annotations

# One CPU flavour (Debian 12, Python 3.11) built on a debootstrap base, the [build] table left
# open for more keys: a part of templates filled by str.format (its braces doubled).
CPU_FLAVOUR = """\
[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11"]

[build]
base = {{ debian12 = "debootstrap:bookworm" }}
"""

DEMO_STACK = """\
[stack]
name = "{name}"
release = "{release}"
image = "trainstack/{name}"

[index]
url = "{url}"

[components]
demo-pkg = "==1.0"

""" + CPU_FLAVOUR + """\
min_free_disk_gb = 0
retries = 1
{build_extra}

[toolchain]
packages = []
nvcc = false
{tail}"""


def demo_stack(name: str, url: str, *, release: str = "2026.12.0", build_extra: str = "", tail: str = "") -> str:
    """A stack of one component, demo-pkg ==1.0 from the index at ``url`` (tests.wheels.demo_wheel),
    on CPU_FLAVOUR; ``build_extra`` goes into [build], ``tail`` after the last table."""
    return DEMO_STACK.format(name=name, url=url, release=release, build_extra=build_extra, tail=tail)

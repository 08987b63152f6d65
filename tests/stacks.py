"""Stack files the tests write, from parts they share."""

from __future__ import annotations

from pathlib import Path

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


# a torch 2.5.1 stack with DeepSpeed compiled from its sdist for sm_90: which nvcc routes reach a flavour
NVCC_STACK = """\
[stack]
name = "routes"
release = "1"
image = "trainstack/routes"

[components]
torch = {{ version = "==2.5.1", group = "torch" }}
deepspeed = {{ version = "==0.15.4", source = "sdist", build_env = {{ DS_BUILD_FUSED_ADAM = "1" }}, requires = ["torch"] }}

[matrix]
cuda = ["{cuda}"]
os = ["{os}"]
python = ["{python}"]

[build]
base = {{ "{os}" = "docker.io/library/debian:trixie" }}

[toolchain]
packages = ["ninja"]
archs = ["90"]
{rules}"""


def nvcc_stack(tmp_path: Path, cuda: str, os_name: str, python: str = "3.11", rules: str = "") -> Path:
    path = tmp_path / f"{cuda}-{os_name}.toml"
    path.write_text(NVCC_STACK.format(cuda=cuda, os=os_name, python=python, rules=rules), encoding="utf-8")
    return path

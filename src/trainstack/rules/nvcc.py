"""Where a flavour's nvcc comes from (its toolchain route), from the rules data. Pure.

A CUDA flavour that builds extensions needs an nvcc of its own CUDA release (major.minor):
  - "wheel": the nvcc wheel on PyPI, where that release's wheels hold nvcc (CUDA 13), for
    venv and OCI builds alike;
  - "debian": for OCI builds on a Debian base, the nvidia-cuda-toolkit of that Debian
    release's non-free archive, where it packages the flavour's CUDA (11.8 on debian12,
    12.4 on debian13), installed pinned to its exact Debian version;
  - "devel": for OCI builds on NVIDIA's CUDA devel image of the flavour's release (its tag
    says the release: 12.1.1-cudnn8-devel-ubuntu22.04), that image's own nvcc;
  - "host": for venv builds, the host's nvcc (CUDA_HOME, else PATH) when its release is the
    flavour's.
The host's nvcc is looked up at the edge (trainstack.hostnvcc) and handed in as a HostNvcc.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from trainstack.rules.data import nvcc_refusal, nvcc_unusable
from trainstack.rules.schema import DebianToolkitRelease, Rules, fill


@dataclass(frozen=True)
class HostNvcc:
    """What the host offers as nvcc: the program, the CUDA home it belongs to, its release."""

    found_by: str  # "CUDA_HOME" or "PATH"
    nvcc: str | None = None  # the program; None when there is none
    home: str | None = None  # the CUDA home (CUDA_HOME, else the folder above nvcc's bin/)
    cuda: str | None = None  # its release, '12.4'; None when its --version did not say
    problem: str | None = None  # why nvcc is missing or unusable

    def describe(self) -> str:
        if self.nvcc is None:
            return self.problem or f"no nvcc ({self.found_by})"
        if self.cuda is None:
            return f"an nvcc at {self.nvcc} ({self.found_by}) that gives no CUDA release ({self.problem or 'nvcc --version'})"
        return f"nvcc {self.cuda} at {self.nvcc} ({self.found_by})"


@dataclass(frozen=True)
class Route:
    kind: Literal["wheel", "debian", "devel", "host"]
    text: str
    debian: DebianToolkitRelease | None = None  # the package release, for "debian"
    home: str | None = None  # the CUDA home inside the image, for "devel"


# a devel tag: the release first, 'devel' among its dash-separated words
_DEVEL_TAG = re.compile(r"^([0-9]{1,2})\.([0-9]{1,2})(?:\.[0-9]{1,3})?(?:-[a-z0-9.]+)*-devel(?:-[a-z0-9.]+)*\Z")


def wheel_route(rules: Rules, cuda: str) -> Route | None:
    if nvcc_refusal(rules, cuda) is not None:
        return None
    package = rules.cuda.nvcc.packages[cuda.split(".")[0]]
    return Route("wheel", f"nvcc {cuda} from the PyPI wheel {package}")


def debian_release(rules: Rules, os_name: str) -> DebianToolkitRelease | None:
    debian = rules.cuda.debian
    return debian.os.get(os_name) if debian is not None else None


def debian_route(rules: Rules, cuda: str, os_name: str) -> Route | None:
    """The Debian archive's toolkit of the flavour's OS, when it is of the flavour's CUDA."""
    debian = rules.cuda.debian
    release = debian_release(rules, os_name)
    if debian is None or release is None or release.cuda != cuda:
        return None
    text = fill(
        debian.message,
        os=os_name,
        suite=release.suite,
        cuda=release.cuda,
        package=debian.package,
        version=release.version,
        component=debian.component,
    )
    return Route("debian", text, release)


def devel_cuda(rules: Rules, image: str) -> str | None:
    """'12.1' for docker.io/nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04 (a digest after the tag
    is kept out); None for any other image."""
    devel = rules.cuda.devel_image
    if devel is None or ":" not in image:
        return None
    name, _, tag = image.split("@")[0].rpartition(":")
    if name not in devel.repositories:
        return None
    match = _DEVEL_TAG.fullmatch(tag)
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def devel_route(rules: Rules, cuda: str, base: str | None, declared: str | None = None) -> Route | None:
    """The base image's own nvcc: NVIDIA's devel image of the flavour's release by its tag, or a
    base the stack declares a CUDA devel image of that release ([build] base_cuda)."""
    devel = rules.cuda.devel_image
    if devel is None or base is None:
        return None
    if declared is not None:
        if declared != cuda:
            return None
        text = f"nvcc {cuda} of the base image {base} at {devel.cuda_home} (declared CUDA {cuda} devel by [build] base_cuda)"
        return Route("devel", text, home=devel.cuda_home)
    if devel_cuda(rules, base) != cuda:
        return None
    return Route("devel", fill(devel.message, image=base, cuda=cuda, home=devel.cuda_home), home=devel.cuda_home)


def oci_route(rules: Rules, cuda: str, os_name: str, base: str | None = None, declared: str | None = None) -> Route | None:
    """The wheel's nvcc, else Debian's of the base's archive, else the devel base image's own."""
    return wheel_route(rules, cuda) or debian_route(rules, cuda, os_name) or devel_route(rules, cuda, base, declared)


def venv_route(rules: Rules, cuda: str, host: HostNvcc | None) -> Route | None:
    """The wheel's nvcc, else the host's when it is of the flavour's CUDA (None: host not looked at)."""
    wheel = wheel_route(rules, cuda)
    if wheel is not None:
        return wheel
    if host is not None and host.nvcc is not None and host.cuda == cuda:
        return Route("host", f"the host's nvcc {cuda} at {host.nvcc} ({host.found_by})")
    return None


def debian_offers(rules: Rules) -> str:
    """'CUDA 11.8 on debian12, CUDA 12.4 on debian13' (what the rules' Debian releases package)."""
    debian = rules.cuda.debian
    if debian is None or not debian.os:
        return "no Debian release in the rules packages one"
    return ", ".join(f"CUDA {r.cuda} on {name}" for name, r in sorted(debian.os.items()))


def no_route(rules: Rules, cuda: str, os_name: str, host: HostNvcc, base: str | None = None) -> str:
    """One line: the CUDA the flavour's extensions need, why no source gives it, what the host
    has, and how to provide it."""
    why = nvcc_unusable(rules, cuda) or "no nvcc wheel"
    debian = rules.cuda.debian
    fixes = [f"CUDA_HOME set to a CUDA {cuda} toolkit (venv builds)"]
    if debian is not None:
        fixes += [
            f"os {name} (Debian's {debian.package} {r.version}, OCI builds)" for name, r in sorted(debian.os.items()) if r.cuda == cuda
        ]
    devel = rules.cuda.devel_image
    if devel is not None and devel.repositories:
        fixes.append(f"a base image {devel.repositories[0]}:{cuda}.x-...-devel-... (OCI builds)")
    fixes.append(f'[build] base_cuda = {{ "{os_name}" = "{cuda}" }} for a base image that is a CUDA {cuda} devel image (OCI builds)')
    fixes.append(f"[toolchain] nvcc = false on a CUDA {cuda} devel base image (OCI builds)")
    image = f"; the base image {base} is no CUDA {cuda} devel image" if base else ""
    return (
        f"no nvcc of CUDA {cuda} for its extensions: the PyPI wheels cannot give it ({why}); "
        f"{os_name} has none in Debian's archive (it packages {debian_offers(rules)}){image}; "
        f"the host has {host.describe()}. Provide it: {', or '.join(fixes)}"
    )


def no_oci_route(rules: Rules, cuda: str, os_name: str, base: str | None) -> str:
    """One line: why an OCI build of the flavour has no nvcc of its CUDA, and how to give it one."""
    why = nvcc_unusable(rules, cuda) or "no nvcc wheel"
    fixes = []
    debian = rules.cuda.debian
    if debian is not None:
        fixes += [f"os {name} (Debian's {debian.package} {r.version})" for name, r in sorted(debian.os.items()) if r.cuda == cuda]
    devel = rules.cuda.devel_image
    if devel is not None and devel.repositories:
        fixes.append(f"a base image {devel.repositories[0]}:{cuda}.x-...-devel-...")
    fixes.append(f'[build] base_cuda = {{ "{os_name}" = "{cuda}" }} for a base image that is a CUDA {cuda} devel image')
    image = f"the base image {base} is no CUDA {cuda} devel image" if base else "no base image is given for it"
    return (
        f"no nvcc of CUDA {cuda} for its extensions in an image build: the PyPI wheels cannot give it ({why}); "
        f"{os_name} has none in Debian's archive (it packages {debian_offers(rules)}); {image}. "
        f"Provide it: {', or '.join(fixes)}"
    )


def routes_text(rules: Rules, cuda: str, os_name: str, host: HostNvcc | None, base: str | None = None, declared: str | None = None) -> str:
    """Which nvcc each backend's build of the flavour uses: 'oci: ...; venv: ...'."""
    oci = oci_route(rules, cuda, os_name, base, declared)
    venv = venv_route(rules, cuda, host)
    if host is None:
        venv_text = venv.text if venv is not None else f"the host's nvcc, which must be of CUDA {cuda}"
    else:
        venv_text = venv.text if venv is not None else f"none (needs nvcc {cuda}; the host has {host.describe()})"
    oci_text = oci.text if oci is not None else f"none ({os_name} has no nvcc {cuda} in its archive, the base image none of its own)"
    return f"oci builds: {oci_text}; venv builds: {venv_text}"

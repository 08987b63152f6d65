"""Where a CUDA flavour's nvcc comes from: PyPI's wheel where it holds nvcc (CUDA 13), Debian's
non-free nvidia-cuda-toolkit of a Debian base for OCI builds (11.8 on debian12, 12.4 on
debian13), the host's nvcc of the flavour's release for venv builds; check refuses a flavour
with extensions that has none, in one line.

Real: check runs as a process against the host's own nvcc (CUDA_HOME pointed where wanted),
the example's Containerfile is rendered from its committed lock and its line that enables the
archive component runs on real sources files, the host's nvcc compiles the probe kernel, and
the Debian versions the rules pin are resolved by apt in a scratch apt root (no install)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stacks import nvcc_stack
from trainstack.builder.extensions import host_cuda_home, probe_compile
from trainstack.builder.steps import Steps
from trainstack.errors import BuildError
from trainstack.hostnvcc import find_host_nvcc
from trainstack.lock.requests import flavour_requests
from trainstack.rules import shipped_rules
from trainstack.rules.nvcc import HostNvcc, devel_cuda, oci_route, venv_route
from trainstack.stackfile import expand_flavours, load_stack

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "stacks" / "deepspeed-cuda12-debian.toml"
HOST_CUDA = Path("/usr/local/cuda-13.0")  # a real CUDA toolkit where the machine has one

# CUDA 13's wheels taken away: the host's nvcc 13.0 is then the only route of a cu130 flavour
NO_CUDA13_WHEEL = "\n[rules.cuda.nvcc]\ncompiles = []\n"


def check(path: Path, cuda_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_HOME": str(cuda_home), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "trainstack", "check", str(path), "-v", *args],
                          check=False, capture_output=True, text=True, env=env, timeout=120)


def route_line(out: str) -> str:
    (line,) = [line for line in out.splitlines() if " toolchain.route: " in line]
    return line


def test_debian_bases_take_the_toolkit_their_archive_packages(tmp_path: Path) -> None:
    empty = tmp_path / "no-cuda"
    empty.mkdir()
    trixie = check(nvcc_stack(tmp_path, "12.4", "debian13", "3.13"), empty, "--backend", "oci")
    assert trixie.returncode == 0, trixie.stdout + trixie.stderr
    line = route_line(trixie.stdout)
    assert "oci builds: debian13 (trixie) packages nvcc of CUDA 12.4 as nvidia-cuda-toolkit=12.4.131~12.4.1-2" in line
    assert f"venv builds: none (needs nvcc 12.4; the host has no nvcc at CUDA_HOME/bin/nvcc (CUDA_HOME={empty}))" in line
    assert line.endswith("<https://packages.debian.org/trixie/nvidia-cuda-toolkit>")
    bookworm = check(nvcc_stack(tmp_path, "11.8", "debian12"), empty, "--backend", "oci")
    assert bookworm.returncode == 0, bookworm.stdout + bookworm.stderr
    assert "nvidia-cuda-toolkit=11.8.89~11.8.0-5~deb12u1 in its non-free archive" in route_line(bookworm.stdout)


def test_a_flavour_with_no_route_is_refused_in_one_line_naming_what_would_do(tmp_path: Path) -> None:
    empty = tmp_path / "no-cuda"
    empty.mkdir()
    for cuda, os_name, why in [("12.1", "ubuntu22.04", "nvidia-cuda-nvcc-cu12 holds only ptxas"),
                               ("12.4", "debian12", "nvidia-cuda-nvcc-cu12 holds only ptxas"),
                               ("11.8", "debian13", "no nvcc wheel is known for CUDA 11")]:
        done = check(nvcc_stack(tmp_path, cuda, os_name, "3.11"), empty)
        assert done.returncode == 3, done.stdout + done.stderr
        errors = [line for line in done.stdout.splitlines() if line.startswith("error ")]
        assert len(errors) == 1 and " toolchain.nvcc: " in errors[0]
        assert f"no nvcc of CUDA {cuda} for its extensions" in errors[0] and why in errors[0]
        assert f"the host has no nvcc at CUDA_HOME/bin/nvcc (CUDA_HOME={empty})" in errors[0]
        assert f"CUDA_HOME set to a CUDA {cuda} toolkit (venv builds)" in errors[0]
        assert f"[toolchain] nvcc = false on a CUDA {cuda} devel base image" in errors[0]
        assert "the base image docker.io/library/debian:trixie is no CUDA" in errors[0]
        if cuda == "12.4":  # the one Debian release that packages it is named
            assert "os debian13 (Debian's nvidia-cuda-toolkit 12.4.131~12.4.1-2, OCI builds)" in errors[0]
        assert done.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.skipif(not (HOST_CUDA / "bin" / "nvcc").is_file(), reason="no CUDA 13.0 toolkit on this machine")
def test_the_hosts_nvcc_of_the_flavours_release_is_the_venv_route_and_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = nvcc_stack(tmp_path, "13.0", "ubuntu24.04", "3.12", NO_CUDA13_WHEEL).read_text()
    path = tmp_path / "host.toml"
    path.write_text(stack.replace("==2.5.1", "==2.11.0"), encoding="utf-8")
    done = check(path, HOST_CUDA)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"venv builds: the host's nvcc 13.0 at {HOST_CUDA}/bin/nvcc (CUDA_HOME)" in route_line(done.stdout)
    # the build takes that CUDA home and compiles the probe kernel with it
    spec = load_stack(path)
    (flavour,) = expand_flavours(spec)
    monkeypatch.setenv("CUDA_HOME", str(HOST_CUDA))
    home = host_cuda_home(spec.rules_in_effect, flavour.slug, flavour.cuda, flavour.os)
    assert home == HOST_CUDA
    probe_compile(Steps(tmp_path / "steps"), home, "90", tmp_path / "probe")
    assert (tmp_path / "probe" / "probe.o").stat().st_size > 0
    # a cu124 flavour on the same host: one line naming the flavour, the CUDA it needs and what was found
    with pytest.raises(BuildError) as info:
        host_cuda_home(spec.rules_in_effect, "cu124-debian13-py313-release", "12.4", "debian13")
    message = info.value.message
    assert "\n" not in message and message.startswith("flavour cu124-debian13-py313-release: no nvcc of CUDA 12.4")
    assert f"the host has nvcc 13.0 at {HOST_CUDA}/bin/nvcc (CUDA_HOME)" in message


def test_host_nvcc_is_found_as_torch_finds_it(tmp_path: Path) -> None:
    assert find_host_nvcc({"CUDA_HOME": str(tmp_path), "PATH": ""}).describe() == (
        f"no nvcc at CUDA_HOME/bin/nvcc (CUDA_HOME={tmp_path})")
    assert find_host_nvcc({"PATH": str(tmp_path)}).describe() == "no nvcc on PATH and CUDA_HOME unset"
    program = shutil.which("nvcc")
    if program is None:
        return
    found = find_host_nvcc({"PATH": str(Path(program).parent)})
    assert found.found_by == "PATH" and found.nvcc == program and re.fullmatch(r"\d+\.\d+", found.cuda or "")


def test_routes_follow_the_rules_data() -> None:
    rules = shipped_rules()
    assert oci_route(rules, "13.0", "ubuntu24.04").kind == "wheel"
    assert oci_route(rules, "12.4", "debian13").kind == "debian" and oci_route(rules, "12.4", "debian12") is None
    assert oci_route(rules, "11.8", "debian12").debian.suite == "bookworm"
    assert oci_route(rules, "12.6", "ubuntu22.04") is None
    host = HostNvcc("PATH", "/usr/bin/nvcc", "/usr", "12.4")
    assert venv_route(rules, "12.4", host).kind == "host" and venv_route(rules, "12.6", host) is None
    assert venv_route(rules, "12.4", None) is None  # the host not looked at


def test_lock_plans_no_nvcc_wheel_where_the_wheels_hold_none(tmp_path: Path) -> None:
    """CUDA 11.8 was refused at lock ('no nvcc wheel is known for CUDA 11'); CUDA 12's toolchain
    layer locked nvcc wheels that hold only ptxas. Both now lock the build tools alone."""
    for cuda, os_name in [("11.8", "debian12"), ("12.4", "debian13")]:
        spec = load_stack(nvcc_stack(tmp_path, cuda, os_name, "3.11" if cuda == "11.8" else "3.13"))
        (flavour,) = expand_flavours(spec)
        assert flavour_requests(spec, flavour).layers["toolchain"].requirements == ("ninja",)


def _rendered(tmp_path: Path) -> str:
    from trainstack.cli import main

    assert main(["render", str(EXAMPLE), "--out", str(tmp_path / "render")]) == 0
    return (tmp_path / "render" / "cu124-debian13-py313-release" / "Dockerfile").read_text()


def test_the_containerfile_installs_debians_toolkit_pinned_in_the_toolchain_stage(tmp_path: Path) -> None:
    text = _rendered(tmp_path)
    stage = text[text.index("FROM extras AS toolchain"):text.index("FROM system AS fetch-deepspeed")]
    assert "apt-get install -y --no-install-recommends 'nvidia-cuda-toolkit=12.4.131~12.4.1-2'" in stage
    assert "FROM toolchain AS compile-deepspeed" in text and "FROM extras AS compile-" not in text
    compile_stage = text[text.index("FROM toolchain AS compile-deepspeed"):text.index("FROM extras AS final")]
    assert "/usr/bin/nvcc -arch=sm_90 -c /tmp/probe.cu" in compile_stage
    assert "CUDA_HOME=/usr " in compile_stage and "DS_ACCELERATOR=cuda" in compile_stage
    assert "TORCH_CUDA_ARCH_LIST=9.0" in compile_stage
    assert "python3.13-dev" in text  # Python.h for extensions compiled against the archive's Python
    # the line that enables the non-free component, run on a deb822 file and a one-line sources.list
    enable = re.search(r"sed -i -E ('[^']+')", stage).group(1)
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\nURIs: http://deb.example/debian\nSuites: trixie trixie-updates\nComponents: main\n\n"
                      "Types: deb\nURIs: http://deb.example/debian-security\nSuites: trixie-security\nComponents: main\n")
    one_line = tmp_path / "sources.list"
    one_line.write_text("deb http://deb.example/debian trixie main\n")
    already = tmp_path / "already.sources"
    already.write_text("Components: main non-free non-free-firmware\n")
    subprocess.run(f"sed -i -E {enable} {deb822} {one_line} {already}", shell=True, check=True)
    assert deb822.read_text().count("Components: main non-free\n") == 2
    assert one_line.read_text() == "deb http://deb.example/debian trixie main non-free\n"
    assert already.read_text() == "Components: main non-free non-free-firmware\n"


def test_a_cuda_devel_base_image_of_the_release_is_the_oci_route_with_its_own_nvcc(tmp_path: Path) -> None:
    """CoreWeave's seed builds on nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04: its compile stages
    use that image's /usr/local/cuda (probe first), not links into ptxas-only wheels."""
    from trainstack.cli import main

    seed = REPO / "examples" / "seeds" / "coreweave-torch-extras-2024.5.0.toml"
    assert main(["render", str(seed), "--out", str(tmp_path / "render")]) == 0
    (dockerfile,) = (tmp_path / "render").rglob("Dockerfile")
    text = dockerfile.read_text()
    assert "/opt/cuda" not in text and "nvidia-cuda-toolkit" not in text and "AS toolchain" not in text
    assert text.count("/usr/local/cuda/bin/nvcc -arch=sm_") == 3  # deepspeed, flash-attn, apex
    assert text.count("CUDA_HOME=/usr/local/cuda ") == 3
    rules = shipped_rules()
    assert devel_cuda(rules, "docker.io/nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04") == "12.1"
    assert devel_cuda(rules, "nvcr.io/nvidia/cuda:12.6.3-devel-ubuntu24.04@sha256:" + "0" * 64) == "12.6"
    assert devel_cuda(rules, "docker.io/nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04") is None  # no nvcc
    assert devel_cuda(rules, "docker.io/someone/cuda:12.1.1-devel-ubuntu22.04") is None
    assert devel_cuda(rules, "docker.io/library/ubuntu:22.04") is None
    # the devel image of another release is no route
    assert oci_route(rules, "12.4", "ubuntu22.04", "docker.io/nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04") is None
    assert oci_route(rules, "12.1", "ubuntu22.04", "docker.io/nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04").kind == "devel"


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="no apt-get")
@pytest.mark.parametrize("os_name", ["debian12", "debian13"])
def test_apt_resolves_the_pinned_toolkit_in_the_debian_archive(tmp_path: Path, os_name: str) -> None:
    """apt-get update in a scratch apt root with the release's non-free component (seconds, no
    install), then the exact version the rules pin, from that component."""
    rules = shipped_rules()
    debian = rules.cuda.debian
    release = debian.os[os_name]
    keyring = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
    if not keyring.is_file():
        pytest.skip("no Debian archive keyring")
    root = tmp_path / "apt"
    for sub in ("etc/apt/sources.list.d", "etc/apt/preferences.d", "var/lib/apt/lists/partial",
                "var/cache/apt/archives/partial", "var/lib/dpkg"):
        (root / sub).mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text("")
    (root / "etc/apt/sources.list.d/debian.sources").write_text(
        f"Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {release.suite}\n"
        f"Components: main {debian.component}\nSigned-By: {keyring}\n")
    options = [f"-oDir={root}", f"-oDir::State::status={root}/var/lib/dpkg/status", "-oDir::Etc::sourcelist=/dev/null",
               f"-oDir::Etc::sourceparts={root}/etc/apt/sources.list.d", "-oDebug::NoLocking=1", "-oAPT::Architecture=amd64"]
    subprocess.run(["apt-get", *options, "update", "-qq"], check=True, capture_output=True, timeout=300)
    shown = subprocess.run(["apt-cache", *options, "show", f"{debian.package}={release.version}"],
                           check=True, capture_output=True, text=True).stdout
    assert f"Version: {release.version}\n" in shown
    assert f"Section: {debian.component}/" in shown
    assert release.version.startswith(release.cuda + ".")

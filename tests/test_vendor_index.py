"""A vendor's torch build with a local version (torch==2.5.1+vendor1, as vendors ship 2.5.1.6 or
+ali builds) from a private index behind basic auth on loopback: check says where it comes from,
lock resolves it from that index alone (PyTorch's variant index is not asked: it does not serve
vendor builds), build makes the venv, report and verify show the local version, and the
credentials are in no file and no output. The wheel is built here: a torch package that answers
what trainstack's probes ask (its version, no CUDA)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loopback import WheelIndex, serve
from tests.private_index import authorized, credentials_env, leaks
from tests.wheels import wheel
from trainstack.cli import main

VERSION = "2.5.1+vendor1"
SLUG = "cpu-debian12-py311-release"


def vendor_torch_wheel() -> tuple[str, bytes]:
    """torch 2.5.1+vendor1 for any Python 3: a real wheel (RECORD with hashes) of a small torch."""
    return wheel("torch", VERSION, {
        "torch/__init__.py": f"__version__ = {VERSION!r}\nfrom . import _C, cuda, version  # noqa: F401\n",
        "torch/version.py": f"__version__ = {VERSION!r}\ncuda = None\nhip = None\ndebug = False\n",
        "torch/cuda.py": "def is_available():\n    return False\n\n\ndef device_count():\n    return 0\n",
        "torch/_C.py": "",
    }, summary="a vendor's torch build")


WHEELS = dict([vendor_torch_wheel()])


class VendorIndex(WheelIndex):
    """A PEP 503 index of the vendor's torch that answers 401 without the right basic credentials."""

    project = "torch"
    wheels = WHEELS
    authorized = 0
    refused = 0
    paths: list[str] = []

    def admit(self) -> bool:
        type(self).paths.append(self.path)
        return authorized(self)


STACK = """\
# torch from a vendor's private index: a local version PyTorch's indexes do not serve
[stack]
name = "vendor"
release = "25.07"
image = "trainstack/vendor"
tag = "{{release}}-torch{{torch}}-py{{python}}"

[index]
url = "{url}"

[components]
torch = {{ version = "=={version}", group = "torch" }}

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11"]

[build]
min_free_disk_gb = 0
retries = 1

[toolchain]
packages = []
nvcc = false

[verify]
smoke = ["imports"]
"""


@pytest.fixture()
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX"):
        monkeypatch.delenv(var, raising=False)
    VendorIndex.authorized, VendorIndex.refused, VendorIndex.paths = 0, 0, []
    with serve(VendorIndex) as url:
        yield url


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_a_vendor_build_locks_builds_and_reports_its_local_version(
        index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key, value in credentials_env(index).items():
        monkeypatch.setenv(key, value)
    stack = tmp_path / "vendor.toml"
    stack.write_text(STACK.format(url=index, version=VERSION))

    assert main(["check", str(stack), "-v"]) == 0
    assert (f"torch.vendor: torch {VERSION} is a vendor's build: it comes from the stack's own index ({index}), "
            "not PyTorch's cpu index") in capsys.readouterr().out

    assert main(["lock", str(stack)]) == 0
    err = capsys.readouterr().err
    assert "download.pytorch.org" not in err  # only the private index was asked
    lock = (tmp_path / "vendor.lock" / "locks" / f"{SLUG}.txt").read_text()
    assert f"torch=={VERSION}" in lock and f"--index-url {index}" in lock
    manifest = json.loads((tmp_path / "vendor.lock" / "stack.lock.json").read_text())
    assert manifest["flavours"][SLUG]["packages"] == {"torch": VERSION} and manifest["flavours"][SLUG]["index"] is None

    shutil.rmtree(tmp_path / "uv-cache")  # the build fetches the wheel from the index again
    build = tmp_path / "build"
    assert main(["build", str(stack), "--backend", "venv", "--build-dir", str(build)]) == 0
    assert any(p.startswith("/files/torch-2.5.1") for p in VendorIndex.paths) and VendorIndex.authorized >= 3

    capsys.readouterr()
    assert main(["report", "--stack", str(stack), "--build-dir", str(build), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["torch"]["version"] == VERSION and report["packages"]["torch"] == VERSION
    assert report["drift"]["missing"] == [] and report["drift"]["different"] == []

    out = tmp_path / "verify.json"
    assert main(["verify", str(stack), "--build-dir", str(build), "--skip", "ops,linkcheck", "-o", str(out)]) == 0
    verified = json.loads(out.read_text())
    assert verified["verdict"] == "pass" and verified["report"]["torch"]["version"] == VERSION

    (tmp_path / "results").mkdir()
    assert main(["release", str(stack), "--results", str(tmp_path / "results"), "--out", str(tmp_path / "notes")]) == 0
    notes = (tmp_path / "notes" / "RELEASE.md").read_text()
    assert f"| torch | {VERSION} |" in notes
    assert "`trainstack/vendor:25.07-torch2.5.1-py3.11`" in notes  # the tag takes the public version: '+' is no tag character

    captured = capsys.readouterr()
    assert leaks(tmp_path, captured.out, captured.err) == []
    shutil.rmtree(build)  # a venv: do not leave it in the test's temp tree


def test_a_vendor_build_without_an_index_of_the_stack_is_refused_by_check(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "vendor.toml"
    stack.write_text(STACK.format(url="x", version=VERSION).replace('[index]\nurl = "x"\n', ""))
    assert main(["check", str(stack)]) == 3
    captured = capsys.readouterr()
    assert "1 rule(s) broken" in captured.err
    assert (f"torch.vendor: torch {VERSION} is a vendor's build, which PyTorch's indexes do not serve; "
            "name the index that does in [index] url, extra or find_links") in captured.out


def test_pytorchs_own_local_versions_still_come_from_its_variant_index() -> None:
    from trainstack.rules import vendor_local

    assert [vendor_local(v) for v in ("2.5.1+vendor1", "2.7.0+ali", "2.5.1+cu124", "2.5.1+cpu", "2.5.1+rocm6.2",
                                      "2.5.1", "2.5.1.6", "not a version")] == ["vendor1", "ali", None, None, None,
                                                                                None, "2.5.1.6", None]

"""Link check on the real CUDA torch wheels from PyPI, installed with uv into a venv."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.verify_fixtures import cuda_venv, damaged_copy, site_packages  # noqa: F401 - fixture
from trainstack.cli import main
from trainstack.verify.linkcheck.check import check_paths
from trainstack.verify.linkcheck.elf import read_elf
from trainstack.verify.linkcheck.resolve import Resolver

pytestmark = pytest.mark.slow


def test_libtorch_cuda_needed_resolve_inside_the_venv(cuda_venv: Path) -> None:  # noqa: F811
    lib = site_packages(cuda_venv) / "torch" / "lib" / "libtorch_cuda.so"
    info = read_elf(str(lib))
    resolver = Resolver.from_environment({})
    venv = str(cuda_venv.resolve())
    nvidia = [n for n in info.needed if n.startswith(("libcudnn", "libnccl", "libcublas", "libcudart"))]
    assert len(nvidia) >= 4
    for name in info.needed:
        found = resolver.find(name, str(lib.parent), info.rpath, info.runpath, info.elf_class)
        assert found is not None, name
        if name in nvidia or name.startswith(("libc10", "libtorch")):
            assert os.path.realpath(found[0]).startswith(venv) or found[0].startswith(str(cuda_venv)), (name, found)
            assert found[1] == "RPATH"


def test_whole_cuda_venv_has_no_link_errors(cuda_venv: Path) -> None:  # noqa: F811
    report = check_paths([cuda_venv])
    assert report.ok, [(i.file, i.library, i.detail) for i in report.errors]
    assert report.files_checked > 50
    # cuDNN's dlopen'ed engines are resolved from libcudnn.so.9's own RUNPATH
    assert not [i for i in report.issues if i.library.startswith("libcudnn")]
    driver = [i for i in report.issues if i.kind == "driver"]
    assert all(i.severity == "note" and i.library == "libcuda.so.1" for i in driver)


def test_one_deleted_nvidia_library_is_reported_precisely(cuda_venv: Path, tmp_path: Path) -> None:  # noqa: F811
    damaged = damaged_copy(cuda_venv, tmp_path, "nvidia/cu13/lib/libcublasLt.so.13")
    assert (site_packages(cuda_venv) / "nvidia/cu13/lib/libcublasLt.so.13").exists()  # original intact
    report = check_paths([damaged])
    assert {i.library for i in report.errors} == {"libcublasLt.so.13"}
    users = {Path(i.file).name for i in report.errors}
    assert {"libtorch_cuda.so", "libcublas.so.13"} <= users
    assert all(i.kind == "unresolved" for i in report.errors)


def test_deleted_cudnn_engine_is_found_by_the_dlopen_data(cuda_venv: Path, tmp_path: Path) -> None:  # noqa: F811
    damaged = damaged_copy(cuda_venv, tmp_path, "nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9")
    report = check_paths([damaged])
    assert [(i.kind, i.library, Path(i.file).name) for i in report.errors] == [
        ("dlopen-missing", "libcudnn_engines_precompiled.so.9", "libcudnn.so.9")
    ]


def test_cli_on_damaged_venv_exits_1(cuda_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    damaged = damaged_copy(cuda_venv, tmp_path, "nvidia/nccl/lib/libnccl.so.2")
    assert main(["linkcheck", "--json", str(damaged)]) == 1
    assert "libnccl.so.2" in capsys.readouterr().out

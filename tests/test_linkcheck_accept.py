"""A true link-check finding the release accepts: a real extension module built here with g++
that, like torch 2.1.2's nvfuser/_C.so, links a library it has no search path to and loads only
once another package (its 'torch') has loaded that library. `import tsfuser` alone fails, so the
finding is true; [verify.links] accept takes it with its reason, which the report, verify.json
and the release notes show, and nothing else is accepted with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from trainstack.cli import main
from trainstack.release.results import parse_verify

HELPER = 'extern "C" int tsfuse_helper_value() { return 42; }\n'
EXTENSION = r"""
#include <Python.h>
extern "C" int tsfuse_helper_value();
static PyObject* value(PyObject*, PyObject*) { return PyLong_FromLong(tsfuse_helper_value()); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
"""
# the package that loads the library first, as torch loads libc10.so by its own search path
LOADER = ("import ctypes, os\n"
          "ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'lib', 'libtsfuse_helper.so'), mode=ctypes.RTLD_GLOBAL)\n")

STACK = """\
[stack]
name = "fuser"
release = "1"
image = "trainstack/fuser"

[components]
numpy = ">=2"

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["{python}"]
{links}"""
ACCEPT = """
[verify.links]
accept = [{ file = "tsfuser/_C*.so", library = "libtsfuse_helper.so", reason = "loads once tshelper is imported first, as every user does", link = "https://github.com/pytorch/pytorch/issues/110873" }]
"""


@pytest.fixture(scope="module")
def fuser_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ is not installed")
    root = tmp_path_factory.mktemp("fuser")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    site = next((root / "venv" / "lib").glob("python3.*/site-packages"))
    (site / "tshelper" / "lib").mkdir(parents=True)
    (site / "tshelper" / "__init__.py").write_text(LOADER)
    (site / "tsfuser").mkdir()
    (site / "tsfuser" / "__init__.py").write_text("from . import _C\n")
    (root / "helper.cpp").write_text(HELPER)
    (root / "ext.cpp").write_text(EXTENSION)
    helper = site / "tshelper" / "lib" / "libtsfuse_helper.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-Wl,-soname,libtsfuse_helper.so", "-o", str(helper), str(root / "helper.cpp")], check=True, timeout=120)
    extension = site / "tsfuser" / ("_C" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(extension), str(root / "ext.cpp"),
                    f"-I{sysconfig.get_paths()['include']}", f"-L{helper.parent}", "-ltsfuse_helper"],
                   check=True, timeout=120)  # no search path of its own, as nvfuser/_C.so has none to libc10.so
    return root / "venv" / "bin" / "python"


def verify(tmp_path: Path, python: Path, links: str) -> tuple[int, dict, str]:
    stack = tmp_path / "stack.toml"
    version = ".".join(map(str, sys.version_info[:2]))
    stack.write_text(STACK.format(python=version, links=links))
    out = tmp_path / "verify.json"
    command = [sys.executable, "-m", "trainstack", "verify", str(stack), "--python", str(python),
               "--skip", "report,ops,smoke,suites", "-o", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "300"})
    return done.returncode, json.loads(out.read_text()), done.stdout + done.stderr


def test_the_finding_is_true(fuser_venv: Path) -> None:
    alone = subprocess.run([fuser_venv, "-c", "import tsfuser"], capture_output=True, text=True, timeout=60)
    assert "libtsfuse_helper.so: cannot open shared object file" in alone.stderr
    after = subprocess.run([fuser_venv, "-c", "import tshelper, tsfuser; print(tsfuser._C.value())"],
                           capture_output=True, text=True, timeout=60)
    assert after.stdout.strip() == "42", after.stderr


def test_an_accepted_link_finding_passes_with_its_reason_shown(fuser_venv: Path, tmp_path: Path) -> None:
    code, result, text = verify(tmp_path, fuser_venv, "")
    [issue] = [i for i in result["links"]["issues"] if i["severity"] == "error"]
    assert issue["library"] == "libtsfuse_helper.so" and issue["status"] == "broken" and not issue["accepted"]
    assert code != 0 and result["verdict"] == "fail"

    code, result, text = verify(tmp_path, fuser_venv, ACCEPT)
    [issue] = [i for i in result["links"]["issues"] if i["severity"] == "error"]
    assert issue["status"] == "broken" and issue["accepted"].startswith("loads once tshelper is imported first")
    assert code == 0 and result["verdict"] == "pass", result["reasons"]
    assert "accepted tsfuser/_C.so needs libtsfuse_helper.so: loads once tshelper is imported first" in text
    assert "1 accepted ([verify.links] accept)" in text
    notes = parse_verify((tmp_path / "verify.json").read_text(), "cpu-debian12-py3-release", tmp_path / "verify.json", "verify")
    [known] = notes.known_issues
    assert known.title.startswith("link: tsfuser/_C") and "needs libtsfuse_helper.so: loads once tshelper" in known.title
    assert known.link == "https://github.com/pytorch/pytorch/issues/110873"

    # an acceptance names its library: another missing library of the same object is not accepted
    other = ACCEPT.replace('library = "libtsfuse_helper.so"', 'library = "libc10.so"')
    code, result, _ = verify(tmp_path, fuser_venv, other)
    assert code != 0 and not any(i["accepted"] for i in result["links"]["issues"])


def test_a_malformed_acceptance_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "stack.toml"
    stack.write_text(STACK.format(python="3.11", links=ACCEPT.replace("tsfuser/_C*.so", "../outside.so")))
    assert main(["check", str(stack)]) == 2
    err = capsys.readouterr().err
    assert_no_traceback(err)
    assert "verify.links.accept.0.file" in err and "is not an object's path under site-packages" in err

"""Resumable extension builds: a real multi-unit C++ torch extension's sdist built through
trainstack.builder.extensions.build_wheel (uv build, torch's BuildExtension, ninja), killed
with SIGKILL half way, then built again: the second build compiles only what was left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from trainstack.builder.extensions import WheelCache
from trainstack.builder.record import ExtensionKey
from trainstack.errors import BuildError
from trainstack.builder.objects import OBJECTS, ObjectRecorder
from trainstack.builder.resume import KeptBuild, ninja_units, toolchain_identity

ROOT = Path(__file__).resolve().parent.parent
UNITS = 6
OUTER = 400  # thousands of constexpr steps per unit: about 1.5 s of g++ each
SEED = 1469598103934665603

needs_tools = pytest.mark.skipif(
    shutil.which("ninja") is None or shutil.which("c++") is None or shutil.which("uv") is None,
    reason="needs ninja, a C++ compiler and uv",
)

UNIT = """
constexpr unsigned long work_{i}(unsigned long h) {{
  for (unsigned long i = 0; i < {outer}; ++i)
    for (unsigned long j = 0; j < 1000; ++j) h = h * 6364136223846793005ul + (i ^ j);
  return h;
}}
constexpr unsigned long value_{i} = work_{i}({seed}ul + {i});
unsigned long get_{i}() {{ return value_{i}; }}
"""
MODULE = """
#include <Python.h>
{decls}
static PyObject* total(PyObject*, PyObject*) {{
  unsigned long sum = 0;
  {calls}
  return PyLong_FromUnsignedLong(sum);
}}
static PyMethodDef methods[] = {{{{"total", total, METH_NOARGS, "sum of the units"}}, {{nullptr, nullptr, 0, nullptr}}}};
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "resumeext", nullptr, -1, methods}};
PyMODINIT_FUNC PyInit_resumeext() {{ return PyModule_Create(&module); }}
"""
SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

sources = ["module.cpp"] + [f"unit{{i}}.cpp" for i in range({units})]
flags = ["-fconstexpr-loop-limit=2000000", "-fconstexpr-ops-limit=4000000000", "-O0"]
setup(name="resumeext", version="0.1", ext_modules=[CppExtension("resumeext", sources, extra_compile_args=flags)],
      cmdclass={{"build_ext": BuildExtension}})
"""
PYPROJECT = '[build-system]\nrequires = ["setuptools", "torch"]\nbuild-backend = "setuptools.build_meta"\n'
# each compile the wrapper sees: its output object, one line in $COUNT_LOG; with $PLANT, that
# source compiled in place of the unit's own (an object of planted code, built by ninja itself)
WRAPPER = """#!/bin/sh
case " $* " in *" -c "*) printf '%s\\n' "$*" >> "$COUNT_LOG" ;; esac
if [ -n "$PLANT" ]; then
  for arg; do shift; case "$arg" in *.cpp) set -- "$@" "$PLANT" ;; *) set -- "$@" "$arg" ;; esac; done
fi
exec {cxx} "$@"
"""
MARKER = b"trainstack_planted_symbol"
PLANTED = """
extern "C" {{ int trainstack_planted_symbol = 1; }}
unsigned long {get}() {{ return 666; }}
"""
DRIVER = """
import json, sys
from pathlib import Path
import torch
from trainstack.builder.extensions import WheelCache, build_wheel
from trainstack.builder.record import ExtensionKey
from trainstack.builder.steps import Steps
source, cache, work, env = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4])
key = ExtensionKey(package="resumeext", version="0.1", torch=torch.__version__, cuda="cpu", archs="",
                   toolchain=(), build_env=(), python=f"{sys.version_info[0]}.{sys.version_info[1]}")
wheel, record = build_wheel(Steps(work / "steps"), WheelCache(cache), key, name="resumeext", target=source,
                            python=Path(sys.executable), env=env, out=work / "out")
print(json.dumps({**record.model_dump(), "path": str(wheel)}))
"""


def expected_total() -> int:
    total = 0
    for unit in range(UNITS):
        h = SEED + unit
        for i in range(OUTER):
            for j in range(1000):
                h = (h * 6364136223846793005 + (i ^ j)) % 2**64
        total = (total + h) % 2**64
    return total


def write_extension(root: Path, outer: int = OUTER) -> Path:
    source = root / "resumeext"
    source.mkdir()
    for i in range(UNITS):
        (source / f"unit{i}.cpp").write_text(UNIT.format(i=i, outer=outer, seed=SEED), encoding="utf-8")
    decls = "\n".join(f"unsigned long get_{i}();" for i in range(UNITS))
    calls = " ".join(f"sum += get_{i}();" for i in range(UNITS))
    (source / "module.cpp").write_text(MODULE.format(decls=decls, calls=calls), encoding="utf-8")
    (source / "setup.py").write_text(SETUP.format(units=UNITS), encoding="utf-8")
    (source / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    return source


def compiled(log: Path) -> set[str]:
    """The objects the compiler wrapper was asked to produce."""
    lines = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    return {Path(line.split(" -o ", 1)[1].split()[0]).name for line in lines}


def recorded_objects(kept: Path) -> dict[str, str]:
    """The objects the build recorded as its own in the kept folder (name -> sha256)."""
    try:
        record = json.loads((kept / OBJECTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {Path(rel).name: entry["sha256"] for rel, entry in record["objects"].items()}


def finished(kept: Path) -> set[str]:
    """Objects ninja has logged as finished (its .ninja_log, a line per finished command)."""
    names = set()
    for log in kept.glob("src/build/*/.ninja_log"):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) == 5 and parts[0].isdigit():
                names.add(Path(parts[3]).name)
    return names


def group_gone(pgid: int, timeout: float = 30) -> None:
    """Wait until no live process of group ``pgid`` is left (SIGKILL lands when each is next
    scheduled; a zombie no longer runs, whoever reaps it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                live.append(stat.parent.name)
        if not live:
            return
        time.sleep(0.05)
    raise AssertionError(f"process group {pgid} still has processes {live} {timeout:g} s after SIGKILL")


@needs_tools
@pytest.mark.timeout(240)
def test_a_build_killed_half_way_resumes_with_only_the_objects_it_recorded(tmp_path: Path) -> None:
    """Killed once objects were recorded; then, in the kept folder, a recorded object replaced by
    one of planted code, another made a link to a copy outside, and an unfinished unit compiled
    from planted code by ninja itself (its log line and deps as real as the build's own). The
    resumed build compiles what was left plus those three, and the planted code is not in the
    wheel."""
    tree = write_extension(tmp_path)
    source = tmp_path / "resumeext-0.1.tar.gz"  # an sdist, as the venv backend hands a source = "sdist" component
    with tarfile.open(source, "w:gz") as tar:
        tar.add(tree, arcname="resumeext-0.1")
    wrapper = tmp_path / "bin" / "c++-counting"
    wrapper.parent.mkdir()
    wrapper.write_text(WRAPPER.format(cxx=shutil.which("c++")), encoding="utf-8")
    wrapper.chmod(0o755)
    cache = tmp_path / "build" / ".extensions"
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

    def driver(run: str) -> list[str]:
        # torch puts ccache before the compiler where it finds one: off, so each compile reaches the wrapper
        env = {"MAX_JOBS": "2", "CXX": str(wrapper), "PATH": path, "TORCH_NO_COMPILER_WRAPPER": "1"}
        work = tmp_path / run
        return [sys.executable, "-c", DRIVER, str(source), str(cache), str(work), json.dumps(env)]

    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    child = subprocess.Popen(
        driver("first"), env={**os.environ, "COUNT_LOG": str(first_log)}, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 150
    kept_folders: list[Path] = []
    while time.monotonic() < deadline and child.poll() is None:
        kept_folders = sorted(cache.glob("resumeext-*.partial"))
        if kept_folders and len(recorded_objects(kept_folders[0])) >= 3:
            break
        time.sleep(0.05)
    assert child.poll() is None, f"the first build ended before it could be killed: {child.communicate()[1][-3000:]}"
    os.killpg(child.pid, signal.SIGKILL)  # the whole build: uv, setuptools, ninja, the compilers
    child.communicate()
    group_gone(child.pid)  # ninja is a grandchild: until it is gone it may still log a unit it saw finish
    [kept] = kept_folders
    recorded, done_before = recorded_objects(kept), finished(kept)
    objects = {f"unit{i}.o" for i in range(UNITS)} | {"module.o"}
    assert 3 <= len(recorded) and set(recorded) <= done_before < objects, (recorded, done_before)
    assert not list(cache.glob("resumeext-*/*.whl"))  # no wheel from the killed build

    [temp] = kept.glob("src/build/temp.*")
    tampered, linked, *reused = sorted(recorded)
    unfinished = sorted(objects - done_before)[0]
    planted = {name: tmp_path / f"planted-{name}.cpp" for name in (tampered, unfinished)}
    for name, code in planted.items():
        code.write_text(PLANTED.format(get=f"get_{name[4:-2]}" if name.startswith("unit") else "planted_get"), encoding="utf-8")
    times = (temp / tampered).stat()
    subprocess.run([shutil.which("c++"), "-fPIC", "-c", planted[tampered], "-o", temp / tampered], check=True, timeout=60)
    os.utime(temp / tampered, ns=(times.st_atime_ns, times.st_mtime_ns))  # its time as ninja recorded it: ninja keeps it
    outside = tmp_path / "outside"
    outside.mkdir()
    (temp / linked).rename(outside / linked)  # the recorded bytes, behind a link
    (temp / linked).symlink_to(outside / linked)
    outside_bytes = (outside / linked).read_bytes()
    ninja = subprocess.run(
        [shutil.which("ninja", path=path), "-C", temp, str(temp / unfinished)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PATH": path, "PLANT": str(planted[unfinished]), "COUNT_LOG": str(tmp_path / "plant.log")},
    )  # fmt: skip
    assert ninja.returncode == 0, ninja.stdout[-2000:]
    assert MARKER in (temp / unfinished).read_bytes() and unfinished in finished(kept)  # logged by ninja as built

    second = subprocess.run(
        driver("second"), env={**os.environ, "COUNT_LOG": str(second_log)}, capture_output=True, text=True, timeout=450
    )
    assert second.returncode == 0, second.stderr[-3000:]
    kept_count = len(recorded) - 2
    assert f"resuming: {kept_count} of {len(objects)} units compiled by an earlier run" in second.stderr
    [dropped] = [line for line in second.stderr.splitlines() if "of the earlier run dropped" in line]
    assert f"1 whose bytes differ from the build's record ({tampered})" in dropped
    assert f"1 reached through a link ({linked})" in dropped and unfinished in dropped.split("did not record as its own")[1]
    # what was compiled again: what the first build had not recorded, the tampered and the linked object
    assert compiled(second_log) == (objects - set(recorded)) | {tampered, linked}
    assert len(compiled(second_log)) < len(objects)  # the rest was reused
    record = json.loads(second.stdout.strip().splitlines()[-1])
    assert record["units"] == len(objects) and record["units_resumed"] == kept_count
    assert record["cache"] == "miss" and not kept.exists()  # the kept objects go once the wheel is stored
    assert (outside / linked).read_bytes() == outside_bytes  # nothing outside touched

    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(record["path"]).extractall(unpacked)
    [library] = unpacked.glob("resumeext*.so")
    assert MARKER not in library.read_bytes()
    run = subprocess.run(
        [sys.executable, "-c", "import sys, torch; sys.path.insert(0, sys.argv[1]); import resumeext; print(resumeext.total())", unpacked],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) == expected_total()


def key(version: str = "0.1") -> ExtensionKey:
    return ExtensionKey(package="ext", version=version, torch="2.13.0+cpu", cuda="cpu", archs="", toolchain=(),
                        build_env=(), python="3.12")  # fmt: skip


def kept_with_object(tmp_path: Path, kept: KeptBuild) -> Path:
    """A kept build whose ninja finished one of two units."""
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    kept.discard()
    (target / "a.cpp").write_text("int a;\n", encoding="utf-8")
    assert kept.open(target) is None  # nothing earlier: a fresh copy
    temp = kept.source / "build" / "temp.x"
    temp.mkdir(parents=True)
    (temp / "build.ninja").write_text(
        f"rule compile\n  command = c++ -c $in -o $out\nbuild {temp}/a.o: compile {kept.source}/a.cpp\n"
        f"build {temp}/b$ c.o: compile {kept.source}/b.cpp\nbuild all: phony {temp}/a.o\n", encoding="utf-8")
    (temp / "a.o").write_bytes(b"\x7fELF")
    (temp / "b c.o").write_bytes(b"half")  # killed mid-compile: not in ninja's log
    (temp / ".ninja_log").write_text(f"# ninja log v5\n1\t2\t0\t{temp}/a.o\tabc\n", encoding="utf-8")
    ObjectRecorder(kept.folder, kept.source, kept.record).poll()  # as the build records what ninja finished
    return temp


def test_the_kept_folder_is_reused_only_for_the_same_key_and_compilers(tmp_path: Path) -> None:
    cache = WheelCache(tmp_path / ".extensions")
    folder = cache.kept_folder(key())
    assert folder.name == f"ext-{key().digest()}.partial"
    tools = {"program /usr/bin/c++": "/usr/bin/g++-14 100 1"}
    temp = kept_with_object(tmp_path, KeptBuild(folder, key(), tools))
    units = KeptBuild(folder, key(), tools).open(tmp_path / "target")
    assert units is not None and (units.done, units.total) == (1, 2)
    assert (temp / "a.o").is_file()
    # another version (source), another compiler: the objects are dropped, the source copied afresh
    for other in (KeptBuild(folder, key("0.2"), tools), KeptBuild(folder, key(), {"program /usr/bin/c++": "/usr/bin/g++-14 100 2"})):
        kept_with_object(tmp_path, KeptBuild(folder, key(), tools))
        assert other.open(tmp_path / "target") is None
        assert not (temp / "a.o").exists() and (other.source / "a.cpp").is_file()
        other.discard()
    # a copy killed before its record was written is not trusted
    kept = KeptBuild(folder, key(), tools)
    kept_with_object(tmp_path, kept)
    (folder / "state.json").unlink()
    assert kept.open(tmp_path / "target") is None and not (temp / "a.o").exists()


def test_a_resume_keeps_only_recorded_objects_and_a_foreign_record_means_a_build_from_scratch(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = WheelCache(tmp_path / ".extensions").kept_folder(key())
    kept = KeptBuild(folder, key(), {})
    temp = kept_with_object(tmp_path, kept)
    (temp / "planted.o").write_bytes(b"\x7fELF planted")
    units = KeptBuild(folder, key(), {}).open(tmp_path / "target")
    assert units is not None and units.done == 1 and (temp / "a.o").read_bytes() == b"\x7fELF"
    assert not (temp / "planted.o").exists() and not (temp / "b c.o").exists()
    assert "2 files of the earlier run dropped, built again: 2 that the build did not record as its own" in capfd.readouterr().err

    # the build folder made a link to a copy outside: nothing taken through it, nothing outside touched
    outside = tmp_path / "outside"
    shutil.copytree(temp, outside)
    shutil.rmtree(temp)
    temp.symlink_to(outside)
    units = KeptBuild(folder, key(), {}).open(tmp_path / "target")
    assert units is None and not temp.exists() and (outside / "a.o").read_bytes() == b"\x7fELF"
    assert "1 reached through a link (temp.x)" in capfd.readouterr().err

    # another build.ninja than the one the objects were recorded with: none of them is kept
    temp = kept_with_object(tmp_path, kept)
    (temp / "build.ninja").write_text("rule compile\n  command = evil\n", encoding="utf-8")
    units = KeptBuild(folder, key(), {}).open(tmp_path / "target")
    assert units is None and not (temp / "a.o").exists()
    assert "of a build folder whose build.ninja is not the recorded one (a.o, build.ninja)" in capfd.readouterr().err

    for record, why in (("{not json", "does not parse"), (json.dumps({"key": {}, "toolchain": {}}), "is of another key or toolchain")):
        temp = kept_with_object(tmp_path, kept)
        (folder / OBJECTS).write_text(record, encoding="utf-8")
        assert KeptBuild(folder, key(), {}).open(tmp_path / "target") is None
        assert not (temp / "a.o").exists() and (kept.source / "a.cpp").is_file()
        err = capfd.readouterr().err
        assert f"its object record {why}" in err and "building from scratch" in err


def test_a_link_out_of_the_kept_folder_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "build.ninja").write_text("build /x.o: compile /x.cpp\n", encoding="utf-8")
    source = tmp_path / "src"
    (source / "build").mkdir(parents=True)
    (source / "build" / "temp.x").symlink_to(outside)
    assert ninja_units(source) is None


def test_the_toolchain_identity_changes_with_a_compiler_behind_a_ccache_link(tmp_path: Path) -> None:
    links, real = tmp_path / "links", tmp_path / "real"
    links.mkdir()
    real.mkdir()
    (links / "c++").symlink_to("/bin/true")  # a ccache link first on PATH
    compiler = real / "g++"
    compiler.write_text("#!/bin/sh\n", encoding="utf-8")
    env = {"PATH": f"{links}{os.pathsep}{real}", "CXXFLAGS": "-O2"}
    before = toolchain_identity(env)
    assert f"program {real / 'g++'}" in before and before["env CXXFLAGS"] == "-O2"
    os.utime(compiler, ns=(0, 10**9))  # the compiler replaced (another version): another identity
    assert toolchain_identity(env) != before
    assert toolchain_identity({**env, "CXXFLAGS": "-O3"})["env CXXFLAGS"] == "-O3"


def test_an_sdist_is_unpacked_into_the_kept_folder_with_its_times(tmp_path: Path) -> None:
    tree = tmp_path / "tree" / "ext-0.1"
    tree.mkdir(parents=True)
    (tree / "a.cpp").write_text("int a;\n", encoding="utf-8")
    os.utime(tree / "a.cpp", (1_600_000_000, 1_600_000_000))
    sdist = tmp_path / "ext-0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree, arcname="ext-0.1")
    kept = KeptBuild(WheelCache(tmp_path / ".extensions").kept_folder(key()), key(), {})
    assert kept.open(sdist) is None
    assert (kept.source / "a.cpp").stat().st_mtime == 1_600_000_000  # ninja compares these with its objects
    assert KeptBuild(kept.folder, key(), {}).open(sdist) is None  # kept, but no ninja build started yet
    assert (kept.folder / "state.json").is_file()

    hostile = tmp_path / "hostile-0.1.tar.gz"
    with tarfile.open(hostile, "w:gz") as tar:
        link = tarfile.TarInfo("hostile-0.1/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    other = KeptBuild(WheelCache(tmp_path / ".extensions").kept_folder(key("9")), key("9"), {})
    with pytest.raises(BuildError, match="not an sdist to unpack"):
        other.open(hostile)
    assert not (other.folder / "state.json").exists()


@needs_tools
@pytest.mark.timeout(240)
def test_the_flash_attn_script_stops_before_its_deadline_and_the_next_run_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/flash_attn_build.py's runs (the build in its own process group, interrupted
    GRACE_S before --deadline-s) on the small extension: the next run resumes and stores the wheel."""
    import argparse
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("flash_attn_build", ROOT / "benchmarks" / "flash_attn_build.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "GRACE_S", 3.0)
    source = write_extension(tmp_path, outer=800)  # slow enough that the first run cannot finish in time
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    planned = {"key": ExtensionKey(package="resumeext", version="0.1", torch=torch.__version__, cuda="cpu", archs="", toolchain=(),
                                   build_env=(), python="3"),
               "env": {"MAX_JOBS": "1", "PATH": path, "TORCH_NO_COMPILER_WRAPPER": "1"}}  # fmt: skip
    cache = tmp_path / "cache"
    first_args = argparse.Namespace(cache=cache, deadline_s=6.0)  # interrupted 3 s in: uv alone takes about 2
    start = time.monotonic()
    first = script.run_build(first_args, source, planned, start)
    assert time.monotonic() - start < 6.0  # it ended before its deadline
    assert first["interrupted"] and not first["finished"], first
    second = script.run_build(argparse.Namespace(cache=cache, deadline_s=200.0), source, planned, time.monotonic())
    assert second["finished"] and not second["interrupted"], second
    done_before = first.get("units_done", 0)
    assert second["units_total"] == UNITS + 1 and second["units_resumed"] == done_before
    assert second["units_compiled_this_run"] == UNITS + 1 - done_before
    assert second["wheel_bytes"] > 0 and second["compile_seconds_total"] > 0


def test_the_flash_attn_check_says_skip_without_a_gpu() -> None:
    """benchmarks/flash_attn_check.py never reports a pass on a machine with no GPU."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flash_attn_check.py"), "--out", os.devnull],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 6, done.stderr
    assert done.stderr.strip() == "error: skip: no GPU (torch.cuda.is_available() is False)"

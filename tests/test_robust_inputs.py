"""Untrusted and broken inputs through the real CLI: one `error:` line and a non-zero exit,
never a traceback, never a hang, nothing half written.

FIFOs, directories, binary and non-UTF-8 files, deep nesting, NaN and negative figures, unknown
schema versions, a previous release newer than the current one, zero model sizes, corrupt ELF
files, a full disk (a real small tmpfs) and files the user may not read (a real unprivileged
process).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.kill_harness import PY311, PY312, cli_ok, index, leftovers, old_lock, tree  # noqa: F401 (fixtures)
from tests.mounts import tmpfs

HANG = 60  # seconds: a command still running by then is a hang


def trainstack(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([sys.executable, "-m", "trainstack.cli", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=HANG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"trainstack {' '.join(args)}: still running after {HANG} s (a hang)")


def one_error(result: subprocess.CompletedProcess[str], *needles: str, code: int | None = None) -> str:
    """The single `error:` line of a failed run, after checking there is no traceback."""
    assert result.returncode != 0, result.stdout + result.stderr
    if code is not None:
        assert result.returncode == code, result.stderr
    assert_no_traceback(result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def project(old_lock: Path, tmp_path: Path) -> Path:  # noqa: F811
    """A locked two-flavour stack (loopback index) with an empty results directory."""
    target = tmp_path / "proj"
    shutil.copytree(old_lock, target)
    (target / "results").mkdir()
    return target


# -- the stack file ------------------------------------------------------------------------


def test_fifo_as_the_stack_file_is_refused_unopened(tmp_path: Path) -> None:
    fifo = tmp_path / "stack.toml"
    os.mkfifo(fifo)
    for verb in ("check", "lock", "render", "keys"):
        one_error(trainstack(verb, str(fifo)), str(fifo), "a FIFO, not a regular file", code=2)


def test_directory_and_binary_stack_files(tmp_path: Path) -> None:
    one_error(trainstack("check", str(tmp_path)), "is a directory; expected a stack file", code=2)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00")
    one_error(trainstack("lock", str(binary)), "not UTF-8 text", code=2)


@pytest.mark.parametrize("nesting", ["a = " + "[" * 20000 + "]" * 20000, "a = " + "{b = " * 5000 + "1" + "}" * 5000])
def test_deeply_nested_toml_is_a_spec_error(tmp_path: Path, nesting: str) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text(nesting + "\n")
    for verb in ("check", "lock"):
        one_error(trainstack(verb, str(deep)), "nested too deeply", code=2)


# -- lock manifests and results given to release -------------------------------------------


def release(project: Path, *extra: str, previous: str = "previous.json") -> subprocess.CompletedProcess[str]:
    return trainstack("release", "small.toml", "--previous", previous, "--results", "results", "--out", "out",
                      *extra, cwd=project)


def test_previous_that_is_a_directory_binary_fifo_or_too_deep(project: Path) -> None:
    (project / "dir.json").mkdir()
    one_error(release(project, previous="dir.json"), "dir.json", "is a directory", code=2)
    (project / "binary.json").write_bytes(bytes(range(256)))
    one_error(release(project, previous="binary.json"), "binary.json", "not UTF-8 text", code=2)
    os.mkfifo(project / "fifo.json")
    one_error(release(project, previous="fifo.json"), "fifo.json", "a FIFO", code=2)
    (project / "deep.json").write_text("[" * 100000 + "]" * 100000)
    one_error(release(project, previous="deep.json"), "deep.json", "nested too deeply", code=2)
    assert not (project / "out").exists()


def test_schema_version_99_is_refused_with_what_is_accepted(project: Path) -> None:
    manifest = json.loads((project / "previous.json").read_text())
    (project / "future.json").write_text(json.dumps({**manifest, "schema_version": 99}))
    one_error(release(project, previous="future.json"), "schema_version: 99", "accepted: 1", code=2)
    verify = project / "results" / PY311 / "verify.json"
    verify.parent.mkdir()
    verify.write_text(json.dumps({"schema_version": 99, "verdict": "pass"}))
    one_error(release(project), "verify.json: schema_version: 99", "accepted: 1", code=2)
    assert not (project / "out").exists()


def test_previous_release_newer_than_the_current_is_refused(project: Path) -> None:
    manifest = json.loads((project / "previous.json").read_text())
    (project / "newer.json").write_text(json.dumps({**manifest, "release": "9"}))
    one_error(release(project, previous="newer.json"), "newer.json", "release 9, newer than 2", code=2)


@pytest.mark.parametrize("figure", ["NaN", "Infinity", "-Infinity", "1e999", "-5", "-0.5"])
def test_nan_infinite_and_negative_bench_figures_are_refused(project: Path, figure: str) -> None:
    line = '{"model": "tiny", "mode": "eager", "batch": 2, "seq": 128, "tokens_per_s_per_gpu": %s}\n' % figure
    (project / "results" / "bench.jsonl").write_text(line)
    one_error(release(project), "bench.jsonl:1", code=2)
    assert not (project / "out").exists()


def test_negative_test_counts_and_nan_in_verify_json(project: Path) -> None:
    verify = project / "results" / PY311 / "verify.json"
    verify.parent.mkdir()
    verify.write_text('{"verdict": "pass", "gate": {"suites": [{"tests": -3}]}}')
    one_error(release(project), "verify.json", "gate.suites.0.tests", code=2)
    verify.write_text('{"verdict": "pass", "gate": {"total_failed": NaN}}')
    one_error(release(project), "verify.json", "NaN", code=2)


def test_nan_in_a_previous_release_json_is_refused(project: Path) -> None:
    assert release(project).returncode == 0
    published = (project / "out" / "release.json").read_text()
    assert "NaN" not in published and "Infinity" not in published
    notes = json.loads(published)
    notes["performance"] = [{"slug": PY311, "model": "tiny", "setup": "", "mode": "eager", "tokens_per_s": -1.0}]
    (project / "old-release.json").write_text(json.dumps(notes))
    one_error(release(project, "--previous-results", "old-release.json"), "old-release.json", "-1.0", code=2)
    (project / "old-release.json").write_text(published.replace('"performance": []', '"performance": NaN'))
    one_error(release(project, "--previous-results", "old-release.json"), "old-release.json", code=2)


def test_binary_non_utf8_and_special_jsonl_results(project: Path) -> None:
    results = project / "results"
    (results / "bench.jsonl").write_bytes(b'{"model": "tiny"}\n\xff\xfe\x00binary\n')
    one_error(release(project), "bench.jsonl", "not UTF-8 text", code=2)
    (results / "bench.jsonl").unlink()
    os.mkfifo(results / "fifo.jsonl")
    one_error(release(project), "fifo.jsonl", "a FIFO", code=2)
    (results / "fifo.jsonl").unlink()
    (results / "dir.jsonl").mkdir()
    one_error(release(project), "dir.jsonl", "is a directory", code=2)
    assert not (project / "out").exists()


# -- outputs: a directory of their own ------------------------------------------------------


def test_render_and_release_refuse_an_out_directory_holding_other_files(project: Path) -> None:
    (project / "mine").mkdir()
    (project / "mine" / "notes.txt").write_text("not rendered\n")
    one_error(trainstack("render", "small.toml", "--out", "mine", cwd=project), "notes.txt", "is not a file render writes", code=2)
    one_error(release(project, "--out", "mine"), "notes.txt", "is not a release output", code=2)
    assert sorted(p.name for p in (project / "mine").iterdir()) == ["notes.txt"]


def test_render_keeps_other_flavours_and_rewrites_nothing_unchanged(project: Path) -> None:
    out = project / "out"
    cli_ok(project, "render", "small.toml", "--out", "out")
    before = tree(out)
    stamp = (out / PY311 / "Dockerfile").stat().st_mtime_ns
    again = trainstack("render", "small.toml", "--out", "out", cwd=project)
    assert again.returncode == 0 and "0 file(s) changed" in again.stdout
    assert tree(out) == before and (out / PY311 / "Dockerfile").stat().st_mtime_ns == stamp
    one = trainstack("render", "small.toml", "--out", "out", "--flavour", PY311, cwd=project)
    assert one.returncode == 0
    kept = {name: data for name, data in before.items() if name.startswith(f"{PY312}/")}
    assert kept and all(tree(out)[name] == data for name, data in kept.items())


# -- a full disk -----------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 2 MiB tmpfs (needs root and a kernel that lets this process mount)."""
    with tmpfs(tmp_path / "disk", "size=2m") as mount:
        yield mount


def fill(disk: Path) -> Path:
    """Write until the device is full; returns the filler file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_full_disk_is_one_line_and_leaves_every_output_whole(small_disk: Path, old_lock: Path) -> None:  # noqa: F811
    project = small_disk / "proj"
    shutil.copytree(old_lock, project)
    (project / "results").mkdir()
    cli_ok(project, "render", "small.toml", "--out", "out")
    cli_ok(project, "release", "small.toml", "--previous", "previous.json", "--results", "results", "--out", "notes")
    before = {name: tree(project / name) for name in ("small.lock", "out", "notes")}

    filler = fill(small_disk)
    one_error(trainstack("lock", "small.toml", "-P", "tinypkg", cwd=project), "small.lock", "No space left on device", code=10)
    assert tree(project / "small.lock") == before["small.lock"]
    filler.unlink()

    cli_ok(project, "lock", "small.toml", "-P", "tinypkg")  # new pins: render and release have new files to write
    filler = fill(small_disk)
    one_error(trainstack("render", "small.toml", "--out", "out", cwd=project), "out", "No space left on device", code=10)
    result = trainstack("release", "small.toml", "--previous", "previous.json", "--results", "results", "--out", "notes",
                        cwd=project)
    one_error(result, "notes", "No space left on device", code=10)
    assert tree(project / "out") == before["out"] and tree(project / "notes") == before["notes"]
    assert leftovers(project) == []
    filler.unlink()


# -- files this user may not read ------------------------------------------------------------


def as_nobody(args: list[str], cwd: Path) -> tuple[int, str]:
    """(exit code, stderr) of ``trainstack ARGS`` run by an unprivileged user: a forked child of this
    process (its modules already imported) that drops to uid/gid 65534 before running the CLI."""
    from trainstack.cli import main

    for verb in ("check", "lock", "release"):  # import each verb and what it imports lazily, before dropping rights
        main([verb, "--help"])
    import trainstack.lock.lock  # noqa: F401
    import trainstack.release.publish  # noqa: F401

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 99
        try:
            os.close(read)
            sys.stderr = os.fdopen(write, "w")  # the consoles write to whatever sys.stderr is
            os.chdir(cwd)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            code = main(args)
        except BaseException as exc:  # noqa: BLE001 (the child must always exit)
            os.write(write, f"Traceback: {exc!r}\n".encode())
        finally:
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 98)
    os.close(write)
    with os.fdopen(read) as stream:
        err = stream.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err


@pytest.fixture
def open_folder():
    """A folder every user can reach (pytest's own are private to their owner)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="trainstack-test-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_unreadable_files_are_one_line(open_folder: Path, old_lock: Path, capsys) -> None:  # noqa: F811
    project = open_folder / "proj"
    shutil.copytree(old_lock, project)
    for path in [project, *project.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    secret = project / "secret.toml"
    shutil.copy(project / "small.toml", secret)
    os.chmod(secret, 0o000)
    runs = {
        "check": (["check", str(secret)], "readable"),
        "lock": (["lock", str(secret)], "readable"),
    }
    outs = open_folder / "outs"  # a folder the user may write in: the output path is not what is tested
    outs.mkdir()
    os.chmod(outs, 0o777)
    shutil.copy(project / "previous.json", project / "readable.json")
    os.chmod(project / "previous.json", 0o000)
    runs["release"] = (["release", "small.toml", "--previous", "previous.json", "--out", str(outs / "out")], "previous.json")
    (project / "changes").mkdir(mode=0o755)
    (project / "changes" / "1.fix.md").write_text("A fix.\n")
    os.chmod(project / "changes" / "1.fix.md", 0o000)
    runs["fragment"] = (["release", "small.toml", "--previous", "readable.json", "--out", str(outs / "out")], "1.fix.md")
    for verb, (args, needle) in runs.items():
        code, err = as_nobody(args, project)
        assert_no_traceback(err)
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1, f"{verb}: {err}"
        assert needle in errors[0] or "Permission denied" in errors[0], f"{verb}: {err}"
    capsys.readouterr()
    assert not (project / "out").exists() and not (outs / "out").exists()


# -- health and bench arguments --------------------------------------------------------------


def test_health_arguments(tmp_path: Path) -> None:
    """Bad input to health exits 64: its 2 means a critical node."""
    one_error(trainstack("health", "--disk", str(tmp_path / "missing")), "--disk", "no such file or directory", code=64)
    one_error(trainstack("health", "--min-driver", "banana"), "--min-driver 'banana'", "550.54.15", code=64)
    one_error(trainstack("health", "--thresholds", str(tmp_path)), "--thresholds", "not a regular file", code=64)
    os.mkfifo(tmp_path / "t.toml")
    one_error(trainstack("health", "--thresholds", str(tmp_path / "t.toml")), "not a regular file", code=64)
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00\x01")
    one_error(trainstack("health", "--thresholds", str(tmp_path / "binary.toml")), "binary.toml", "not UTF-8 text", code=64)


@pytest.mark.parametrize("config", [
    {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 0,
     "intermediate_size": 128, "vocab_size": 100},
    {"model_type": "gpt2", "n_embd": 0, "n_head": 2, "n_layer": 2, "vocab_size": 100},
    {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
     "num_key_value_heads": 0, "intermediate_size": 128, "vocab_size": 100},
])
def test_hugging_face_config_with_zero_sizes(tmp_path: Path, config: dict) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    zero = next(name for name, value in config.items() if value == 0)
    one_error(trainstack("bench", "--hf-config", str(tmp_path), "--device", "cpu"), f"field '{zero}' is 0", "whole number >= 1", code=2)


# -- linkcheck -------------------------------------------------------------------------------


def _some_library() -> Path:
    import ctypes.util

    for name in ("z", "m", "c"):
        found = ctypes.util.find_library(name)
        for folder in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
            if found and (Path(folder) / found).is_file():
                return (Path(folder) / found).resolve()
    pytest.skip("no system shared library to copy")


def test_linkcheck_skips_special_files_and_fails_on_broken_elf(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    library = _some_library()
    shutil.copy(library, root / "libgood.so")
    os.mkfifo(root / "libfifo.so")  # opened, it would block forever
    ok = trainstack("linkcheck", str(root), "--no-confirm")
    assert ok.returncode == 0 and "linkcheck OK" in ok.stdout + ok.stderr, ok.stdout + ok.stderr
    data = library.read_bytes()
    (root / "libtruncated.so").write_bytes(data[: len(data) // 3])
    (root / "libcorrupt.so").write_bytes(b"\x7fELF" + b"\xff" * 200)
    broken = trainstack("linkcheck", str(root), "--no-confirm")
    text = broken.stdout + broken.stderr
    assert_no_traceback(text)
    assert broken.returncode == 1, text
    assert "libtruncated.so" in text and "truncated" in text and "libcorrupt.so" in text
    assert "linkcheck FAILED" in text

"""Every verb driven as a new user would: installed without torch, then with a CPU torch;
output into a pipe (as in a CI log); bad arguments. Never a traceback, errors in one line
that starts with 'error:', no output line over 200 columns, arguments checked before torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from trainstack.cli import VERBS

REPO = Path(__file__).resolve().parents[1]
STACK = REPO / "examples" / "stacks" / "cpu-minimal.toml"
MAX_COLUMNS = 200
TORCH_EXTRA = "pip install 'trainstack[torch]'"


def _run(python: str | Path, *args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run([str(python), "-m", "trainstack.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def assert_clean(proc: subprocess.CompletedProcess[str]) -> None:
    """No traceback, an error is one 'error:' line (plus a usage line), no line over MAX_COLUMNS."""
    assert_no_traceback(proc.stderr)
    assert "Error:" not in proc.stderr, proc.stderr
    for line in (proc.stdout + proc.stderr).splitlines():
        assert len(line) <= MAX_COLUMNS, f"{len(line)} columns: {line[:120]}..."
    if proc.returncode not in (0,) and proc.stderr.strip():
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, proc.stderr


def _rows(path: Path) -> Path:
    """A results file as bench writes it (two modes), for --compare."""
    rows = [{"model": "tiny", "mode": mode, "status": "ok", "batch": 2, "seq": 64, "world_size": 1,
             "tokens_per_s_per_gpu": speed, "mfu": None, "mem_allocated_gib": 1.0} for mode, speed in (("eager", 100.0), ("compile", 150.0))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --- installed without torch ----------------------------------------------------------


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """trainstack installed from this tree into a fresh venv, as the README's install does: no torch."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is a dependency of trainstack and must be on PATH")
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([uv, "pip", "install", "-q", "--python", str(python), "-e", str(REPO)], check=True, timeout=600)
    probe = subprocess.run([str(python), "-c", "import torch"], capture_output=True, text=True)
    assert probe.returncode != 0, "torch is in the bare environment"
    return python


@pytest.mark.parametrize(
    "args",
    [
        ("bench", "--preset", "tiny", "--device", "cpu"),
        ("bench", "--device", "cuda"),
        ("memplan", "--preset", "tiny", "--seq", "64", "--budget", "1GiB"),
        ("health", "--level", "2"),
    ],
    ids=["bench", "bench-cuda", "memplan", "health-2"],
)
def test_without_torch_one_line_names_the_extra(bare_python: Path, args: tuple[str, ...]) -> None:
    proc = _run(bare_python, *args)
    assert proc.returncode == 6, proc.stderr
    assert_clean(proc)
    assert proc.stderr.splitlines() == [f"error: trainstack {' '.join(args[:1] if args[0] != 'health' else args[:3])} needs torch, "
                                        f"which is not installed (install it with: {TORCH_EXTRA})"]


@pytest.mark.parametrize("args", [("bench", "--preset", "tiny", "--device", "cpu"), ("memplan", "--preset", "tiny", "--seq", "64"), ("health", "--level", "2")],
                         ids=["bench", "memplan", "health-2"])
def test_a_torch_that_is_installed_but_fails_to_import_is_one_line(bare_python: Path, args: tuple[str, ...], tmp_path: Path) -> None:
    """As a CUDA wheel on a machine without its libraries fails: found, then ImportError at import."""
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("libcudnn.so.9: cannot open shared object file")\n')
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")} | {"PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run([str(bare_python), "-m", "trainstack.cli", *args], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 6, proc.stderr
    assert_clean(proc)
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")][0]
    assert "needs torch, which is installed but cannot be imported: libcudnn.so.9: cannot open shared object file" in error
    assert "pip install --force-reinstall torch" in error


def test_without_torch_every_help_and_the_cheap_verbs_work(bare_python: Path, tmp_path: Path) -> None:
    for verb in ["--help", *VERBS]:
        proc = _run(bare_python, verb, "--help")
        assert proc.returncode == 0, (verb, proc.stderr)
        assert_clean(proc)
    a = _rows(tmp_path / "a.jsonl")
    proc = _run(bare_python, "bench", "--compare", str(a), str(a))
    assert proc.returncode == 0 and "1.00x" in proc.stdout, proc.stderr
    assert_clean(proc)
    proc = _run(bare_python, "check", str(STACK), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["broken"] == 0
    proc = _run(bare_python, "memplan", "--preset", "tiny", "--seq", "100000")
    assert proc.returncode == 2 and "max_seq 256" in proc.stderr
    assert_clean(proc)


# --- with a CPU torch -----------------------------------------------------------------


def _imports_torch(*args: str) -> tuple[subprocess.CompletedProcess[str], bool]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "trainstack.cli", *args], capture_output=True, text=True, timeout=300)
    imported = any(line.split("|")[-1].strip() == "torch" for line in proc.stderr.splitlines() if line.startswith("import time:"))
    return proc, imported


def test_arguments_are_checked_before_torch_is_imported(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    for args, code in [
        (("memplan", "--preset", "tiny", "--seq", "100000"), 2),
        (("memplan", "--budget", "60"), 2),
        (("memplan", "--preset", "70b"), 2),
        (("bench", "--preset", "70b"), 2),
        (("bench", "--compare", str(_rows(tmp_path / "a.jsonl")), str(_rows(tmp_path / "b.jsonl"))), 0),
    ]:
        proc, imported = _imports_torch(*args)
        assert proc.returncode == code, (args, proc.stderr[-500:])
        assert not imported, f"{' '.join(args)} imported torch"


def test_bench_on_cuda_without_a_gpu_is_one_line() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    proc = _run(sys.executable, "bench", "--device", "cuda", "--preset", "tiny")
    assert proc.returncode == 6
    assert_clean(proc)
    assert proc.stderr.startswith("error: trainstack bench --device cuda needs a CUDA GPU:")


def test_planned_mode_runs_on_the_tiny_preset_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = _run(sys.executable, "bench", "--preset", "tiny", "--device", "cpu", "--modes", "planned",
                "--steps", "2", "--warmup", "1", "--batch", "2", "--seq", "64", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert_clean(proc)
    (row,) = [json.loads(line) for line in (tmp_path / "bench-tiny-b2-s64.jsonl").read_text().splitlines()]
    assert row["mode"] == "planned" and row["status"] == "ok" and row["tokens_per_s_per_gpu"] > 0
    assert "planned plan:" in proc.stdout and " keep, " in proc.stdout


# --- bad arguments, every verb ----------------------------------------------------------

BAD = [
    ("check", "missing.toml"),
    ("check",),
    ("lock", str(STACK), "--bogus"),
    ("keys", str(STACK), "--flavour", "nope"),
    ("render", "missing.toml"),
    ("build", str(STACK), "--backend", "podman"),
    ("report", "--python", "/nonexistent/python"),
    ("linkcheck", "/nonexistent/dir"),
    ("verify", "--skip", "bogus"),
    ("release", "missing.toml", "--previous", "missing.json"),
    ("health", "--level", "7"),
    ("bench", "--batch", "many"),
    ("memplan", "--budget", "lots"),
    ("memplan", "--json", "plan.json"),
    ("nosuchverb",),
]


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a[:2]) for a in BAD])
def test_bad_arguments_are_one_error_line(args: tuple[str, ...], tmp_path: Path) -> None:
    proc = _run(sys.executable, *args, cwd=tmp_path)
    assert proc.returncode not in (0, 1), (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("error: "), proc.stderr
    assert_clean(proc)
    assert len(proc.stderr.splitlines()) <= 2  # the error, and for a usage error where the help is


def test_cheap_verbs_into_a_pipe(tmp_path: Path) -> None:
    """Output into a pipe: whole lines, within MAX_COLUMNS for tables and messages alike."""
    for args in (("health",), ("report",), ("check", str(STACK), "--verbose")):
        proc = _run(sys.executable, *args, cwd=tmp_path)
        assert proc.returncode in (0, 1, 2, 3), proc.stderr
        assert_clean(proc)


# --- in a terminal ----------------------------------------------------------------------


def _in_terminal(*args: str, columns: int, cwd: Path) -> str:
    """stdout and stderr of the CLI on a pseudo-terminal ``columns`` wide, as a person sees them."""
    import fcntl
    import pty
    import struct
    import termios

    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.Popen([sys.executable, "-m", "trainstack.cli", *args], stdout=child_fd, stderr=child_fd,
                            stdin=subprocess.DEVNULL, cwd=cwd, env={**env, "TERM": "dumb"})
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(main_fd)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def test_in_a_terminal_tables_fit_its_width(tmp_path: Path) -> None:
    """Tables shrink to the terminal; lines of text are left to the terminal to wrap (soft wrap)."""
    rows = str(_rows(tmp_path / "a.jsonl"))
    for args in (("health",), ("report",), ("bench", "--compare", rows, rows)):
        text = _in_terminal(*args, columns=80, cwd=tmp_path)
        assert_no_traceback(text)
        widest = max(len(line) for line in text.splitlines())
        assert widest <= 80, f"{' '.join(args)}: a line of {widest} columns in an 80-column terminal\n{text}"

"""One convention across every verb, driven through the real command line: output paths checked
before any work, -h/-q/-v/--color everywhere, and one exit-code table that the README, each
verb's --help and the code paths agree on."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from tests.mounts import tmpfs
from trainstack.cli import VERBS, main
from trainstack.errors import EXIT_TABLE, bad_input_code, exit_codes_line, readme_rows

REPO = Path(__file__).resolve().parents[1]
STACK = str(REPO / "examples" / "stacks" / "cpu-minimal.toml")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def this_checkout() -> dict[str, str]:
    """PYTHONPATH as the tests run with it: the trainstack under test, not another installed one."""
    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    piped = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run([sys.executable, "-m", "trainstack.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**piped, **(env or {})}, cwd=cwd)


# --- outputs safe before work -------------------------------------------------------------

# verb -> (the arguments with OUT where the output path goes, the option, True when it is a folder)
OUTPUTS: dict[str, tuple[list[str], str, bool]] = {
    "check": ([STACK, "--output", "OUT"], "--output", False),
    "report": (["--output", "OUT"], "--output", False),
    "linkcheck": ([str(REPO / "src"), "-o", "OUT"], "--output", False),
    "verify": (["--python", sys.executable, "--output", "OUT"], "--output", False),
    "health": (["--output", "OUT"], "--output", False),
    "memplan": (["--preset", "tiny", "-o", "OUT"], "--output", False),
    "bench": (["--preset", "tiny", "--device", "cpu", "--output", "OUT"], "--output", False),
    "bench --out": (["--preset", "tiny", "--device", "cpu", "--out", "OUT"], "--out", True),
    "bench --compare": (["--compare", STACK, STACK, "--output", "OUT"], "--output", False),
    "run": (["--out", "OUT", "--", "true"], "--out", True),
    "release": ([STACK, "--previous", STACK, "--out", "OUT"], "--out", True),
    "render": ([STACK, "--out", "OUT"], "--out", True),
    "build": ([STACK, "--build-dir", "OUT"], "--build-dir", True),
}


@contextlib.contextmanager
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A real read-only place (root ignores mode bits, not a read-only mount)."""
    with tmpfs(tmp_path / "ro", "ro,size=64k") as place:
        yield place


def bad_places(tmp_path: Path, folder: bool) -> dict[str, tuple[Path, str]]:
    """What each kind of bad output path is, and the words the error must have."""
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("kept\n")
    wrong_kind = (a_file, "is a file") if folder else (tmp_path, "is a directory")
    return {
        "wrong kind": wrong_kind,
        "special": (Path("/proc/trainstack-nope.json"), "a special path"),
        "under a file": (a_file / "out.json", "Not a directory"),
    }


def assert_refused(verb: str, argv: list[str], option: str, path: Path, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = verb.split()[0]
    code = main([name, *[str(path) if a == "OUT" else a for a in argv]])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == bad_input_code(name), (verb, code, captured.err)
    assert len(lines) == 1 and lines[0].startswith(f"error: {option} {path}: "), (verb, captured.err)
    assert why in lines[0] and "accepted:" in lines[0], lines[0]
    assert_no_traceback(captured.err + captured.out)
    assert captured.out == "", (verb, captured.out)  # nothing ran


@pytest.mark.parametrize("verb", list(OUTPUTS))
def test_every_output_path_is_checked_before_any_work(verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, option, folder = OUTPUTS[verb]
    for kind, (path, why) in bad_places(tmp_path, folder).items():
        assert_refused(verb, argv, option, path, why, capsys)
    with read_only_folder(tmp_path) as place:
        target = place / ("out" if folder else "out.json")
        assert_refused(verb, argv, option, target, "nothing can be written in", capsys)
        assert not os.path.lexists(target)
    assert (tmp_path / "a-file.txt").read_text() == "kept\n"  # never written over


def test_bench_refuses_an_existing_file_as_its_folder_before_importing_torch(tmp_path: Path) -> None:
    """`bench --out FILE` used to run the whole benchmark, then lose it: now it stops first."""
    code = (
        "import sys; from trainstack.cli import main; rc = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    readme = tmp_path / "README.md"
    readme.write_text("a file\n")
    proc = subprocess.run([sys.executable, "-c", code, "bench", "--preset", "tiny", "--out", str(readme)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"error: --out {readme}: is a file; accepted: a folder (made if missing)\n"
    assert readme.read_text() == "a file\n"


@contextlib.contextmanager
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem with no byte left (a small tmpfs, filled): a file can be created there
    (so the check before the work passes), but nothing written into it."""
    with tmpfs(tmp_path / "full", "size=64k") as full:
        with contextlib.suppress(OSError), open(full / "filler", "wb") as handle:  # noqa: PTH123
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
        yield full


def test_a_finished_benchmark_is_kept_when_its_output_cannot_be_written(tmp_path: Path) -> None:
    """The output's disk is full when bench ends: the check before the run passes, the write
    at the end fails, and the results land in a new file the error names."""
    pytest.importorskip("torch")
    work = tmp_path / "work"
    work.mkdir()
    with full_disk(tmp_path) as full:
        proc = run("bench", "--preset", "tiny", "--seq", "32", "--steps", "2", "--warmup", "1", "--device", "cpu",
                   "--modes", "eager", "--output", str(full / "bench.json"), cwd=work)
    assert proc.returncode == 10, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    match = re.fullmatch(rf"error: --output {re.escape(str(full / 'bench.json'))}: cannot write \(.+\); the results are in (\S+)", last)
    assert match, proc.stderr
    kept = json.loads(Path(match.group(1)).read_text())
    assert kept["rows"][0]["status"] == "ok" and kept["rows"][0]["tokens_per_s_per_gpu"] > 0
    assert Path(match.group(1)).parent == work


def test_a_result_file_the_disk_cannot_hold_is_one_line_and_exit_10(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with full_disk(tmp_path) as full:
        code = main(["check", STACK, "--output", str(full / "check.json")])
        leftovers = sorted(p.name for p in full.iterdir())
    captured = capsys.readouterr()
    assert code == 10, captured.err
    assert captured.err == f"error: {full / 'check.json'}: cannot write: No space left on device (a previous file there is unchanged)\n"
    assert leftovers == ["filler"]  # no half-written file


# --- options every verb takes -------------------------------------------------------------


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_takes_h_in_a_real_process_and_ends_with_its_exit_codes(verb: str) -> None:
    proc = run(verb, "-h")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith(f"Usage: trainstack {verb} ")
    assert " ".join(proc.stdout.split()).endswith(exit_codes_line(verb))


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_takes_q_v_and_color(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (["-q"], ["-v"], ["--quiet", "--verbose"], ["--color", "never"], ["--color", "always"], ["--color", "auto"]):
        assert main([verb, *flags, "--help"]) == 0, (verb, flags, capsys.readouterr().err)
        text = capsys.readouterr().out
        assert "-q, --quiet" in text and "-v, --verbose" in text and "--color auto|always|never" in text
    assert main([verb, "--color", "pink", "--help"]) == bad_input_code(verb)
    assert "error: --color pink: accepted: auto, always, never" in capsys.readouterr().err


def test_color_follows_the_option_then_no_color_and_force_color() -> None:
    missing = str(REPO / "no-such-stack.toml")
    assert not ANSI.search(run("check", missing).stderr)  # a pipe: no colour
    assert ANSI.search(run("check", missing, "--color", "always").stderr)
    assert ANSI.search(run("check", missing, env={"FORCE_COLOR": "1"}).stderr)
    assert not ANSI.search(run("check", missing, "--color", "never", env={"FORCE_COLOR": "1"}).stderr)
    assert ANSI.search(run("check", missing, "--color", "always", env={"NO_COLOR": "1"}).stderr)
    plain = run("check", missing, "--color", "always").stderr
    assert ANSI.sub("", plain) == f"error: {missing}: no such stack file\n"


def test_color_asked_for_outright_colours_a_dumb_terminal_and_auto_does_not() -> None:
    """TERM=dumb (a minimal root's console, an Emacs shell): FORCE_COLOR and --color always still
    colour, as they promise; left to itself, trainstack does not."""
    escape = re.compile(r"\x1b\[[0-9;]*m")
    missing = str(REPO / "no-such-stack.toml")
    assert escape.search(run("check", missing, env={"TERM": "dumb", "FORCE_COLOR": "1"}).stderr)
    assert escape.search(run("check", missing, "--color", "always", env={"TERM": "dumb"}).stderr)
    assert not escape.search(run("check", missing, env={"TERM": "dumb", "TTY_COMPATIBLE": "1"}).stderr)


def test_v_shows_every_command_and_q_only_the_result() -> None:
    """report runs probes in the target quietly: -v shows their command lines, -q shows none."""
    verbose = run("report", "--python", sys.executable, "--json", "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert any(line.startswith(f"$ {sys.executable}") for line in verbose.stderr.splitlines()), verbose.stderr
    quiet = run("report", "--python", sys.executable, "--json", "-q")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert json.loads(quiet.stdout)["python"]  # the result itself still comes
    check = run("check", str(REPO / "examples" / "stacks" / "torch-cuda.toml"), "-v")
    assert check.returncode == 0 and any(line.startswith("info ") for line in check.stdout.splitlines())


def test_help_in_a_pipe_is_not_wrapped() -> None:
    proc = run("memplan", "-h")
    line = next(line for line in proc.stdout.splitlines() if "--compiled" in line)
    assert line.rstrip().endswith("and the plan names one."), line  # the whole help on the option's line


def test_memplan_usage_shows_no_internal_argument() -> None:
    proc = run("memplan", "-h")
    assert proc.stdout.splitlines()[0] == "Usage: trainstack memplan [OPTIONS]"


def test_model_means_one_thing_each_old_spelling_warns_once() -> None:
    memplan = run("memplan", "--model", "no_such_module_here:build", "--budget", "1GiB")
    assert memplan.returncode == 2
    warning = "--model is now --preset (a preset name) or --factory (MODULE:FUNCTION, memplan); --model will go"
    assert memplan.stderr.splitlines()[0] == f"warning: memplan {warning}"
    assert memplan.stderr.splitlines()[1].startswith("error: --factory: cannot import 'no_such_module_here'")
    bench = run("bench", "--model", "huge", "--device", "cpu")
    assert bench.returncode == 2 and bench.stderr.count("warning:") == 1
    assert bench.stderr.startswith(f"warning: bench {warning}\n")
    assert bench.stderr.splitlines()[1].startswith("error: bench --model: unknown preset 'huge'; accepted: tiny, 125m")
    run_o = run("run", "-o", "/proc/x", "--", "true")
    assert run_o.stderr.splitlines()[0].startswith("warning: run -o is now --out")
    assert run_o.stderr.splitlines()[1].startswith("error: --out /proc/x: a special path")


# --- one exit-code table ------------------------------------------------------------------


def test_the_readme_table_and_every_verbs_help_equal_the_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if re.match(r"^\| `[a-z]+` \|", line)]
    assert rows == readme_rows()
    assert list(EXIT_TABLE) == list(VERBS)
    for verb in VERBS:
        assert main([verb, "--help"]) == 0
        assert exit_codes_line(verb) in " ".join(capsys.readouterr().out.split()), verb


def test_within_a_verb_each_code_means_one_thing() -> None:
    for verb, (_, others) in EXIT_TABLE.items():
        codes = [code for code, _ in others]
        assert 0 not in codes and len(codes) == len(set(codes)), verb
        assert bad_input_code(verb) in codes or verb == "run"


def test_health_bad_input_is_not_critical(tmp_path: Path) -> None:
    proc = run("health", "--level", "9")
    assert proc.returncode == 64 and proc.stderr == "error: --level 9: accepted values are 1, 2, 3\n"
    proc = run("health", "--bogus")
    assert proc.returncode == 64 and proc.stderr.startswith("error: No such option: --bogus")


def test_verify_of_a_flavour_never_built_exits_8(tmp_path: Path) -> None:
    proc = run("verify", STACK, "--build-dir", str(tmp_path))
    assert proc.returncode == 8, proc.stderr
    assert proc.stderr.startswith(f"error: {tmp_path}/cpu-debian12-py311-release/venv: flavour cpu-debian12-py311-release is not built")


def test_a_build_step_without_a_network_exits_5_not_7(tmp_path: Path) -> None:
    """A real name lookup that fails (the reserved .invalid domain never resolves)."""
    from trainstack.builder.steps import Steps
    from trainstack.errors import NetworkError

    lookup = "import socket; socket.getaddrinfo('trainstack.invalid', 443)"
    with pytest.raises(NetworkError) as caught:
        Steps(tmp_path).run("venv", [sys.executable, "-c", lookup])
    assert caught.value.exit_code == 5 and "step venv: network failure" in str(caught.value)


# --- defaults that run on a CPU -----------------------------------------------------------


def test_memplan_defaults_run_on_a_cpu_and_a_fraction_is_taken_as_run_takes_it() -> None:
    pytest.importorskip("torch")
    from trainstack.memplan.budget import gpu_memory_bytes, host_memory_bytes
    from trainstack.run.planning import parse

    if gpu_memory_bytes() is not None:
        pytest.skip("this machine has a GPU: the defaults are the GPU's")
    proc = run("memplan", "--preset", "tiny", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    from trainstack.nn.presets import shape

    assert plan["seq"] == min(2048, shape("tiny")["max_seq"])  # within the preset's max_seq
    assert plan["budget_bytes"] == int(host_memory_bytes() * 0.9)
    assert "note: no GPU here: --budget 0.9 is of this host's memory" in proc.stderr
    assert parse("0.9", "--memplan") == plan["budget_bytes"]  # run --memplan takes a fraction the same way


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_the_log_paths_a_build_prints_exist_after_it_succeeds(tmp_path: Path) -> None:
    """Steps log into a staging folder renamed into place at the end: the paths printed are
    the ones that hold the logs afterwards."""
    from tests.build_fixtures import make_lock, source_stack

    stack, _, _ = source_stack(tmp_path)
    make_lock(stack)
    build = tmp_path / "build"
    proc = run("build", str(stack), "--build-dir", str(build), "--skip-sources")
    assert proc.returncode == 0, proc.stderr
    printed = re.findall(r"\(log: (\S+\.log)\)", proc.stderr)
    assert printed, proc.stderr
    for path in printed:
        assert Path(path).is_file(), f"{path} printed but gone after the build"
        assert ".staging" not in path


@pytest.mark.timeout(150)
def test_a_fraction_budget_without_a_gpu_plans_in_run_as_in_memplan(tmp_path: Path) -> None:
    """`run --memplan 0.8` used to warn and run unplanned while `memplan --budget 0.8` exited
    2: both now take the fraction of the host's memory where there is no GPU, and plan."""
    pytest.importorskip("torch")
    from tests.clirun import clean_env
    from trainstack.memplan.budget import gpu_memory_bytes

    if gpu_memory_bytes() is not None:
        pytest.skip("this machine has a GPU")
    job = [sys.executable, str(REPO / "tests" / "data" / "run" / "plain_loop.py"), "--steps", "2", "--batch", "256"]
    planned = subprocess.run([sys.executable, "-m", "trainstack.cli", "run", "--out", "o", "--memplan", "0.8", "--", *job],
                             capture_output=True, text=True, env=clean_env(**this_checkout()), cwd=tmp_path, timeout=120)
    assert planned.returncode == 0, planned.stderr[-2000:]
    assert "trainstack run: memplan for 0.8: " in planned.stderr, planned.stderr
    memplan = run("memplan", "--preset", "tiny", "--budget", "0.8", "--json")
    assert memplan.returncode == 0, memplan.stderr


def test_python_m_trainstack_is_the_command_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "trainstack", "check", "-h"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: trainstack check "), proc.stderr

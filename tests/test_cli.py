"""The command line itself: verbs, help, usage errors and exit codes, in real processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.clirun import assert_no_traceback
from trainstack.cli import VERBS, main


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainstack.cli", *args], capture_output=True, text=True, timeout=120, env=env)


def test_help_lists_every_verb():
    proc = run("--help")
    assert proc.returncode == 0
    for verb in VERBS:
        assert verb in proc.stdout


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_help_shows_an_example(verb, capsys):
    assert main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Example:" in out and f"trainstack {verb}" in out.replace("\n", " ")


def test_misspelt_verb_is_one_line_with_the_closest_verb():
    proc = run("lokc", "examples/stacks/cpu-minimal.toml")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: no verb 'lokc' (perhaps you meant 'lock'?)"


def test_unknown_option_is_a_usage_error_without_traceback():
    proc = run("lock", "--bogus", "x")
    assert proc.returncode == 2
    assert_no_traceback(proc.stderr)
    assert "No such option: --bogus" in proc.stderr


def test_version():
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("trainstack ")


# --- conventions shared by every verb -------------------------------------------------

EXAMPLES = "examples/stacks"


def test_error_text_is_printed_verbatim_not_as_markup():
    for name in ("[/x].toml", "pattern '^*$' [bold]x[/bold].toml"):
        proc = run("check", name)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == f"error: {name}: no such stack file\n"


def test_print_error_never_reads_markup(capsys):
    from trainstack.console import print_error

    print_error("[/x] pattern '^*$' [red]not red[/]")
    assert capsys.readouterr().err == "error: [/x] pattern '^*$' [red]not red[/]\n"


def test_usage_errors_use_the_one_error_prefix_and_name_the_help():
    for args in (("lock", "--bogus", "x"), ("lock",), ("memplan", "--seq", "x"), ("bench", "--batch", "many")):
        proc = run(*args)
        assert proc.returncode == 2, args
        lines = proc.stderr.splitlines()
        assert lines[0].startswith("error: ") and "Error:" not in proc.stderr, proc.stderr
        assert f"see 'trainstack {args[0]} --help'" in lines[-1]
        assert_no_traceback(proc.stderr)


def test_root_help_imports_no_verb():
    """`trainstack --help` reads no verb's module (nor torch): what keeps it quick, which
    benchmarks/cli_speed.py measures beside typer and rich alone."""
    code = (
        "import sys; from trainstack.cli import main; main(['--help']); "
        "assert not [m for m in sys.modules if m.startswith(('trainstack.bench', 'trainstack.lock', 'trainstack.verify', "
        "'trainstack.builder', 'trainstack.release', 'torch'))], 'a verb was imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


HELP_NOISE = ("<bool>", "<int", "<str>", "<path>", "<list[", "x>=", "[default: ]")


@pytest.mark.parametrize("verb", list(VERBS))
def test_help_reads_as_words(verb, capsys):
    assert main([verb, "--help"]) == 0
    text = capsys.readouterr().out
    for noise in HELP_NOISE:
        assert noise not in text, f"{verb} --help shows {noise!r}"
    assert not re.search(r"\w \.(\s|$)", text), f"{verb} --help lost a word before a full stop"
    assert max(len(line) for line in text.splitlines()) <= 200
    example = next(line for line in text.splitlines() if line.strip().startswith("Example:"))
    assert example.strip().startswith(f"Example: trainstack {verb}")  # one line, copyable whole


def test_no_verb_prints_the_help_not_an_error():
    proc = run()
    assert proc.returncode == 2 and proc.stderr == ""
    assert proc.stdout.startswith("Usage: trainstack [OPTIONS] COMMAND") and "Commands:" in proc.stdout


def test_root_help_summaries_are_whole():
    proc = run("--help")
    assert not [line for line in proc.stdout.split("Commands:")[1].splitlines() if line.endswith("...")]
    for verb, summary in __import__("trainstack.cli").cli.SUMMARIES.items():
        assert verb in proc.stdout and summary.split()[-1] in proc.stdout


def test_output_into_a_pipe_is_never_wrapped():
    proc = run("check", f"{EXAMPLES}/torch-cuda.toml", "--verbose")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all(line.startswith(("info ", "warning ", "error ", "runs: ", "all rules hold")) for line in lines)
    findings = [line for line in lines if line.startswith(("info ", "warning ", "error "))]
    assert findings and all(line.endswith(">") for line in findings)  # each finding and its source link on one line


def test_a_terminal_width_is_honoured_when_set(monkeypatch):
    from trainstack.console import make_console

    monkeypatch.setenv("COLUMNS", "60")
    assert make_console().width == 60
    monkeypatch.delenv("COLUMNS")
    assert make_console().width >= 1000  # not a terminal: unwrapped


def test_a_repeatable_option_takes_a_comma_list(capsys):
    assert main(["verify", "--skip", "report, ops,bogus"]) == 2
    assert "error: --skip bogus: not a part of verify" in capsys.readouterr().err
    assert main(["verify", "--help"]) == 0
    assert "separate values with commas" in " ".join(capsys.readouterr().out.split())


def test_bench_json_prints_the_rows_and_output_writes_them(tmp_path):
    """bench --json: stdout is the JSON document alone (the table goes to stderr); --output
    writes the same document; --compare --json gives the matched pairs with their ratios."""
    pytest.importorskip("torch")
    document = tmp_path / "bench.json"
    piped = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}  # as in a CI log
    proc = run("bench", "--preset", "tiny", "--seq", "64", "--batch", "2", "--steps", "2", "--warmup", "1",
               "--device", "cpu", "--modes", "eager", "--out", str(tmp_path), "--json", "--output", str(document), env=piped)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result == json.loads(document.read_text())
    assert result["exit_code"] == 0 and result["modes"] == "eager"
    [row] = result["rows"]
    assert row["status"] == "ok" and row["model"] == "tiny" and row["tokens_per_s_per_gpu"] > 0
    assert_no_traceback(proc.stderr)
    assert "tok/s/GPU" in proc.stderr, proc.stderr  # the table, for people, on stderr
    jsonl = tmp_path / "bench-tiny-b2-s64.jsonl"
    proc = run("bench", "--compare", str(jsonl), str(jsonl), "--json")
    assert proc.returncode == 0, proc.stderr
    [pair] = json.loads(proc.stdout)["pairs"]
    assert pair["mode"] == "eager" and pair["tokens_per_s_b_over_a"] == 1.0 and pair["a"] == pair["b"]

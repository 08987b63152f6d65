"""The command line itself: verbs, help, usage errors and exit codes, in real processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainstack.cli import VERBS, main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainstack.cli", *args], capture_output=True, text=True, timeout=120)


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
    assert "No such option: --bogus" in proc.stderr and "Traceback" not in proc.stderr


def test_version():
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("trainstack ")

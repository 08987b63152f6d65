"""One path rule for every path a stack names (trainstack.stackfile.paths), used by check, build and
verify alike; loader variables in build_env only where [build] allow_env names them; rule messages
filled without ever raising. Hostile stack files for each are in tests/data/corpus/hostile."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.build_fixtures import copy_example
from tests.clirun import assert_no_traceback
from trainstack.buildenv import cache_dir, compiler_cache_env
from trainstack.cli import main
from trainstack.errors import SpecError
from trainstack.rules.schema import fill
from trainstack.stackfile import load_stack
from trainstack.stackfile.paths import stack_path
from trainstack.stackfile.schema import CompilerCache


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    stack = tmp_path / "stack"
    stack.mkdir()
    (stack / "known.toml").write_text("")
    (stack / "out").symlink_to("/etc")
    return stack


@pytest.mark.parametrize(
    ("value", "field", "expect"),
    [
        ("~/../../tmp/x", "build.compiler_cache.dir", "holds '..'"),
        ("/etc/trainstack-cc", "build.compiler_cache.dir", "leads out"),
        ("~/.ssh", "build.compiler_cache.dir", "leads out"),
        ("out/cc", "build.compiler_cache.dir", None),  # relative: under the build directory
        ("~root/../etc/passwd", "verify.known_issues", "'~' may only start '~/'"),
        ("out/passwd", "verify.known_issues", "leads out"),  # a link in the folder
        ("/etc/passwd", "verify.known_issues", "leads out"),
        ("/etc/ssl/certs/../../etc/passwd", "build.ca_bundle", "holds '..'"),
    ],
)
def test_the_rule_refuses_what_leads_out(value: str, field: str, expect: str | None, folder: Path) -> None:
    if expect is None:
        assert stack_path(value, folder, field) == Path(value)
        return
    with pytest.raises(ValueError, match=expect):
        stack_path(value, folder, field)


def test_the_rule_accepts_the_folder_and_the_users_cache(folder: Path) -> None:
    assert stack_path("known.toml", folder, "verify.known_issues") == (folder / "known.toml").resolve()
    assert stack_path(str(folder / "known.toml"), folder, "verify.known_issues") == (folder / "known.toml").resolve()
    assert stack_path("~/.cache/trainstack-cc", folder, "build.compiler_cache.dir") == (Path.home() / ".cache" / "trainstack-cc").resolve()


def test_build_takes_the_compiler_cache_by_the_same_rule(folder: Path, tmp_path: Path) -> None:
    """A setting that never went through check (built without validation) is refused at build too."""
    build = tmp_path / "build"
    hostile = CompilerCache.model_construct(kind="ccache", dir="~/../../tmp/ts-cache", max_size="1G")
    with pytest.raises(SpecError, match=r"build.compiler_cache.dir: '~/../../tmp/ts-cache' holds '..'"):
        compiler_cache_env(hostile, build, stack_folder=folder, launcher=False)
    assert not Path("/tmp/ts-cache").exists()
    relative = CompilerCache(kind="ccache", dir="ccache-dir", max_size="1G")
    assert cache_dir(relative, build, folder) == build / "ccache-dir"
    inside = CompilerCache(kind="ccache", dir=str(folder / "cc"), max_size="1G")
    assert compiler_cache_env(inside, build, stack_folder=folder, launcher=False)["CCACHE_DIR"] == str(folder.resolve() / "cc")


def test_verify_opens_the_known_issues_file_check_accepted(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """check and verify resolve known_issues with the one rule: '~root/..' is refused by both."""
    from trainstack.stackfile.schema import Verify
    from trainstack.verify.run import _gate

    stack = copy_example("cpu-minimal", folder, {r"max_failed_tests = 0\n": 'max_failed_tests = 0\nknown_issues = "~root/../etc/passwd"\n'})
    assert main(["check", str(stack)]) == 2
    assert "verify.known_issues: '~root/../etc/passwd'" in capsys.readouterr().err
    settings = Verify.model_construct(**{**Verify().__dict__, "suite": [object()], "known_issues": "~root/../etc/passwd"})

    class Unchecked:  # a scope whose settings never went through check
        stack_path = stack
        flavour = None

    Unchecked.settings = settings
    with pytest.raises(SpecError, match=r"verify.known_issues: '~root/../etc/passwd': '~' may only start"):
        _gate(None, Unchecked)  # type: ignore[arg-type]


def test_allow_env_lets_a_named_loader_variable_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (Path(__file__).parent / "data" / "corpus" / "hostile" / "build-env-ld-library-path.toml").read_text()
    path = tmp_path / "stack.toml"
    path.write_text(text.replace("min_free_disk_gb = 1\n", 'min_free_disk_gb = 1\nallow_env = ["LD_LIBRARY_PATH"]\n'))
    stack = load_stack(path)
    assert stack.components["tsdemo"].build_env == {"LD_LIBRARY_PATH": "/tmp/INJECTED"}
    assert main(["check", str(path), "--verbose"]) == 0  # and check shows what it lets through
    assert "build.allow_env: tsdemo.build_env sets LD_LIBRARY_PATH, allowed by [build] allow_env" in capsys.readouterr().out
    path.write_text(text)
    with pytest.raises(SpecError, match=r"stack.toml:11: components.tsdemo.build_env.LD_LIBRARY_PATH: .*allow_env"):
        load_stack(path)


def test_a_rule_message_with_an_unknown_field_is_shown_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rules/check.py formatted stack rule messages with str.format: '{nonsense}' was a KeyError."""
    stack = copy_example("cpu-minimal", tmp_path)
    stack.write_text(stack.read_text() + '\n[rules.platforms.glibc]\nmessage = "{os} has glibc {glibc} and {nonsense}"\nsource = "https://example.com/glibc"\n')
    assert main(["check", str(stack), "--json"]) == 0
    captured = capsys.readouterr()
    assert_no_traceback(captured.err)
    assert "debian12 has glibc 2.36 and {nonsense}" in captured.out
    assert fill("{a} {b.c} {d!r} {", a=1) == "{a} {b.c} {d!r} {"  # not a template: as it is
    assert fill("{a} {b.c} {d!r:>3}", a=1) == "1 {b.c} {d!r:>3}"

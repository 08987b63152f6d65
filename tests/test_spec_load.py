"""The spec loader on good and bad files; bad input is always one SpecError line."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.clirun import assert_no_traceback
from trainstack.cli import main
from trainstack.errors import SpecError
from trainstack.stackfile import expand_flavours, load_stack
from trainstack.stackfile.load import parse_stack

from .conftest import EXAMPLES

MINIMAL = """\
[stack]
name = "tiny"
release = "1"
image = "trainstack/tiny"

[components]
numpy = ">=2"

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11", "3.12"]
"""


@pytest.mark.parametrize("name", ["cpu-minimal", "torch-cuda"])
def test_examples_load(name: str) -> None:
    stack = load_stack(EXAMPLES / f"{name}.toml")
    assert expand_flavours(stack)


def test_torch_cuda_matrix_is_two_cuda_two_os_two_python_two_channels_minus_one_exclude() -> None:
    stack = load_stack(EXAMPLES / "torch-cuda.toml")
    flavours = expand_flavours(stack)
    assert {f.cuda for f in flavours} == {"12.8", "13.0"}
    assert {f.os for f in flavours} == {"ubuntu22.04", "ubuntu24.04"}
    assert {f.python for f in flavours} == {"3.11", "3.12"}
    assert {f.channel for f in flavours} == {"release", "nightly"}
    assert len(flavours) == 16 - 4
    apex = stack.components["apex"]
    assert apex.commit is not None and len(apex.commit) == 40


def _error(text: str, tmp_path: Path) -> str:
    with pytest.raises(SpecError) as info:
        parse_stack(text, tmp_path / "stack.toml")
    return str(info.value)


def test_toml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    message = _error(MINIMAL.replace('numpy = ">=2"', "numpy = >=2"), tmp_path)
    assert "stack.toml" in message and "line 7" in message and "column" in message


def test_unknown_field_suggests_closest_name(tmp_path: Path) -> None:
    message = _error(MINIMAL.replace('release = "1"', 'release = "1"\nimgae = "x"'), tmp_path)
    assert message == f"{tmp_path / 'stack.toml'}:4: stack.imgae: unknown field; did you mean 'image'?"


def test_unknown_component_field_suggests_closest_name(tmp_path: Path) -> None:
    text = MINIMAL.replace('numpy = ">=2"', 'numpy = { verison = ">=2" }')
    message = _error(text, tmp_path)
    assert ":7: components.numpy.verison: unknown field; did you mean 'version'?" in message


def test_every_cell_excluded(tmp_path: Path) -> None:
    text = MINIMAL + 'exclude = [{ python = "3.11" }, { python = "3.12" }]\n'
    assert "every cell is excluded" in _error(text, tmp_path)


def test_bad_specifier_says_what_is_accepted(tmp_path: Path) -> None:
    message = _error(MINIMAL.replace('">=2"', '"two"'), tmp_path)
    assert ":7: components.numpy.version:" in message and "==2.9.1" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('numpy = ">=2"', 'numpy = { version = ">=2", extras = ["ok", "-bad"] }',
         ":7: components.numpy.extras: '-bad' is not an extra (PEP 508 name such as 'cuda12' or 'dev')"),
        ('numpy = ">=2"', 'numpy = { version = ">=2", when = { os = ["debian12", "Debian 12"] } }',
         ":7: components.numpy.when.os: 'Debian 12' is not an OS name (try 'ubuntu24.04' or 'debian12')"),
        ('cuda = ["cpu"]', 'cuda = ["cpu", "12"]', ":10: matrix.cuda: '12' is not a CUDA version (try '12.8' or 'cpu')"),
        ('numpy = ">=2"', 'numpy = { git = "https://github.com/numpy/numpy", commit = "HEAD" }',
         ":7: components.numpy.commit: 'HEAD' is not a git commit (7 to 40 lowercase hex digits)"),
    ],
)
def test_a_bad_value_is_named_by_its_field_and_line(tmp_path: Path, old: str, new: str, expected: str) -> None:
    """A list's bad item is named by the list (as the stack file writes it), not by its index."""
    assert _error(MINIMAL.replace(old, new), tmp_path).endswith(expected)


def test_requires_needs_exact_version(tmp_path: Path) -> None:
    text = MINIMAL.replace('numpy = ">=2"', 'numpy = { version = ">=2", source = "sdist", requires = ["einops"] }')
    assert "exact version" in _error(text, tmp_path)


def test_requires_are_requirements(tmp_path: Path) -> None:
    text = MINIMAL.replace('numpy = ">=2"', 'numpy = { version = "==2.0", source = "sdist", requires = ["no such"] }')
    assert "'no such' is not a requirement" in _error(text, tmp_path)


def test_cli_prints_one_line_and_exits_2(write_stack, capsys) -> None:
    path = write_stack(MINIMAL.replace("[matrix]", "[matrix]\ncdua = []"))
    assert main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "did you mean 'cuda'?" in lines[0]
    assert_no_traceback(captured.err + captured.out)


# Bad input generated at random: whatever the text, the loader answers with a Stack or one
# SpecError line, never another exception.
_LINES = MINIMAL.splitlines()


@st.composite
def mutated_stacks(draw) -> str:
    lines = list(_LINES)
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "replace", "insert", "garble"]))
        junk = draw(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30))
        if action == "delete" and len(lines) > 1:
            del lines[index]
        elif action == "replace":
            key = lines[index].split("=", 1)[0]
            lines[index] = f"{key}= {junk}" if "=" in lines[index] else junk
        elif action == "insert":
            lines.insert(index, draw(st.sampled_from(['x = 1', '[extra]', 'cuda = ["12.8"]', '"a.b" = {}', junk])))
        else:
            pos = draw(st.integers(0, len(lines[index])))
            lines[index] = lines[index][:pos] + junk + lines[index][pos:]
    return "\n".join(lines) + "\n"


@given(mutated_stacks())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_stacks_fail_only_with_one_line_spec_errors(text: str) -> None:
    try:
        parse_stack(text, Path("stack.toml"))
    except SpecError as exc:
        message = str(exc)
        assert message.startswith("stack.toml") and "\n" not in message.strip()


@given(st.dictionaries(st.sampled_from(["stack", "components", "matrix", "build", "index", "zz"]), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)))
@settings(max_examples=200, deadline=None)
def test_random_documents_fail_only_with_spec_errors(document: dict) -> None:
    try:
        text = _to_toml(document)
        tomllib.loads(text)
    except (ValueError, TypeError):
        return
    try:
        parse_stack(text, Path("stack.toml"))
    except SpecError as exc:
        assert "\n" not in str(exc).strip()


def _to_toml(document: dict) -> str:
    """A small TOML writer for generated documents (inline tables only)."""

    def value(v) -> str:
        if v is None:
            raise TypeError("TOML has no null")
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v)  # a JSON string is a TOML basic string
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{" + ", ".join(f"{value(k)} = {value(x)}" for k, x in v.items()) + "}"

    return "".join(f"{k} = {value(v)}\n" for k, v in document.items())


def test_a_misspelt_field_is_named_before_the_missing_one_it_hides(tmp_path):
    text = (EXAMPLES / "cpu-minimal.toml").read_text().replace('\npython = ["3.11"]', '\npyton = ["3.11"]')
    path = tmp_path / "typo.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_stack(path)
    line = text.splitlines().index('pyton = ["3.11"]') + 1
    assert str(info.value) == f"{path}:{line}: matrix.pyton: unknown field; did you mean 'python'?"


def test_an_os_unknown_to_the_rules_is_refused_at_load_with_exit_2(write_stack, capsys) -> None:
    """Not only by check's rules (exit 3): no verb starts on a flavour whose platform nothing describes."""
    path = write_stack(MINIMAL.replace('os = ["debian12"]', 'os = ["debian12", "centos7"]'))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {path}:11: matrix.os: OS 'centos7' is not in the rules data (one of: debian12, debian13, ubuntu20.04, "
        'ubuntu22.04, ubuntu24.04); describe it under [rules.platforms.os."centos7"] or pick a known one'
    )
    include = MINIMAL + 'include = [{ cuda = "cpu", os = "alpine3.20", python = "3.11" }]\n'
    assert "matrix.include.0.os: OS 'alpine3.20' is not in the rules data" in _error(include, path.parent)


def test_an_os_the_stack_describes_in_its_own_rules_loads(tmp_path: Path) -> None:
    text = MINIMAL.replace('os = ["debian12"]', 'os = ["centos7"]').replace('["3.11", "3.12"]', '["3.11"]') + (
        '\n[rules.platforms.os."centos7"]\nglibc = "2.17"\nplatform = "x86_64-manylinux_2_17"\n'
        'source = "https://example.com/centos7"\npythons = []\npythons_source = "https://example.com/centos7"\n'
    )
    stack = parse_stack(text, tmp_path / "stack.toml")
    assert [f.os for f in expand_flavours(stack)] == ["centos7"]

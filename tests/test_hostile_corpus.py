"""Stack files as a hostile contributor writes them: tests/data/corpus/bad (values outside their grammar)
and tests/data/corpus/hostile (values that try to become instructions, options, paths or leaks).

Every file goes through check and lock (in process, and a few through the real CLI): each is refused
with one line naming the file, its line and the field, in bounded time, with no traceback and no
credential in the output. The hostile files are then rendered with validation bypassed (the models
built by model_construct): no value may become a line, a shell word or a YAML key of its own.
Planted setup.py files and git's --upload-pack would leave marker files if any process started
from a stack value.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
import tomllib
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from tests.clirun import assert_no_traceback
from trainstack.builder.git import fetch_git
from trainstack.builder.steps import Steps
from trainstack.cli import main
from trainstack.errors import LockError, SpecError, TrainstackError
from trainstack.lock import lock_stack
from trainstack.lock.git import pin_source
from trainstack.lock.manifest import LockedFlavour, Manifest
from trainstack.lock.requests import flavour_requests
from trainstack.lock.resolve import check_request, compile_request
from trainstack.render.api import stack_files
from trainstack.lock.inputs import Inputs
from trainstack.lock.layers import FlavourLayers, SourceBuild, needs_build
from trainstack.lock.lockfile import LockFile, parse_lock
from trainstack.stackfile import expand_flavours, load_stack
from trainstack.stackfile.matrix import components_for
from trainstack.stackfile.schema import Component, Stack

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"
BAD = sorted((CORPUS / "bad").glob("*.toml"))
HOSTILE = sorted((CORPUS / "hostile").glob("*.toml"))
MARK = "INJECTED"  # every hostile payload starts with it
TOKEN = "SECRET-CORPUS-TOKEN"  # the credential planted in the corpus
SECONDS = 10.0  # per file and verb; a hang is a failure
pytestmark = pytest.mark.timeout(120)  # a hang anywhere fails the test instead of the run


def test_corpus_size_and_each_file_says_what_it_attacks() -> None:
    assert len(BAD) >= 100 and len(HOSTILE) >= 75
    for path in BAD + HOSTILE:
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# attacks: ") and len(text) < 2000, path.name


def _refused(verb, path: Path) -> str:
    start = time.monotonic()
    with pytest.raises(TrainstackError) as info:
        verb(path)
    assert time.monotonic() - start < SECONDS, f"{path.name}: {verb.__name__} took too long"
    return str(info.value)


@pytest.mark.parametrize("path", BAD + HOSTILE, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_check_and_lock_refuse_with_one_located_line(path: Path) -> None:
    for verb in (load_stack, lock_stack):
        message = _refused(verb, path)
        assert_no_traceback(message)
        assert "\n" not in message, message
        assert re.match(rf"{re.escape(str(path))}:\d+: [\w.\-\\]+", message), message
        assert TOKEN not in message, message
    assert not (path.parent / f"{path.stem}.lock").exists()


def _run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from trainstack.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "name",
    [
        "bad/component-name-0", "hostile/git-upload-pack", "hostile/index-credentials", "hostile/release-yaml",
        "hostile/ca-bundle-secret-src", "hostile/cache-dir-tilde-climb", "hostile/build-env-ld-preload",
        "hostile/suite-timeout-inf", "hostile/rule-message-attribute", "hostile/known-issues-tilde-root",
    ],
)  # fmt: skip
def test_real_cli_refuses_in_one_line(name: str, tmp_path: Path) -> None:
    path = CORPUS / f"{name}.toml"
    for verb in (["check"], ["lock"], ["render", "--out", str(tmp_path / "out")]):
        result = _run_cli(*verb, str(path))
        assert result.returncode == 2, (verb, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and str(path) in lines[0], (verb, result.stderr)
        assert_no_traceback(result.stderr + result.stdout)
        assert TOKEN not in result.stderr + result.stdout
    assert not (tmp_path / "out").exists()


# ---- validation bypassed: the models built without checks, then rendered and planned ----


def construct(model: type[BaseModel], data: object) -> object:
    """``data`` as ``model`` built by model_construct all the way down (no validation at all)."""
    if not isinstance(data, dict):
        return data
    values = {}
    for name, value in data.items():
        field = model.model_fields.get(name)
        values[name] = _construct_value(field.annotation, value) if field is not None else value
    return model.model_construct(**values)


def _construct_value(annotation: object, value: object) -> object:
    for candidate in [annotation, *typing.get_args(annotation)]:
        origin = typing.get_origin(candidate)
        args = typing.get_args(candidate)
        if isinstance(candidate, type) and issubclass(candidate, BaseModel) and isinstance(value, dict):
            return construct(candidate, value)
        if origin is list and isinstance(value, list) and args:
            return [_construct_value(args[0], item) for item in value]
        if origin is dict and isinstance(value, dict) and len(args) == 2:
            return {k: _construct_value(args[1], v) for k, v in value.items()}
    return value


def unchecked_stack(path: Path) -> Stack:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    components = {}
    for name, item in data.get("components", {}).items():
        item = {"version": item} if isinstance(item, str) else item
        components[name] = construct(Component, {"name": name, **item})
    stack = construct(Stack, {**data, "components": {}})
    return stack.model_copy(update={"components": components})


LOCK_TEXT = (
    "--index-url https://pypi.org/simple\n"
    "numpy==2.2.6 \\\n    --hash=sha256:" + "a" * 64 + "\n"
    "setuptools==80.9.0 \\\n    --hash=sha256:" + "b" * 64 + "\n"
)


def _layers(stack: Stack, flavour) -> FlavourLayers:
    full = parse_lock(LOCK_TEXT)
    locked = LockedFlavour.model_construct(  # unchecked, as the stack is
        **flavour.as_dict(), lock_file=f"locks/{flavour.slug}.txt", lock_sha256="c" * 64, index=None,
        cache_key=f"corpus-{flavour.slug}-{'d' * 12}", packages={"numpy": "2.2.6", "setuptools": "80.9.0"},
    )  # fmt: skip
    sources = tuple(SourceBuild(c, c.requirement() + "\n") for c in components_for(stack, flavour) if needs_build(c))
    return FlavourLayers(flavour, locked, full, full.only({"numpy"}), full.without({"numpy"}), LockFile(full.options, ()), sources)


def render_unchecked(stack: Stack) -> dict[str, str]:
    flavours = expand_flavours(stack)
    manifest = Manifest.model_construct(  # unchecked, as the stack is
        stack=stack.stack.name, release=stack.stack.release, image=stack.stack.image_ref, inputs_hash="e" * 64,
        uv_version="0.13.9", generated_at="2026-12-03T00:00:00+00:00", flavours={},
    )  # fmt: skip
    layers = [_layers(stack, f) for f in flavours]
    return stack_files(Inputs(Path("stack.toml"), stack, manifest, Path("stack.lock"), layers))


def injected(files: dict[str, str]) -> list[str]:
    """Where a planted payload became structure: a line of its own, a shell word, a YAML key."""
    found = []
    for name, text in files.items():
        for number, line in enumerate(text.splitlines(), 1):
            if re.match(rf"^[\s\-\"'#:]*{MARK}", line):
                found.append(f"{name}:{number}: {line}")
        if name.endswith("Dockerfile"):
            for instruction in re.sub(r"\\\n", " ", text).splitlines():
                if not instruction.startswith("RUN "):
                    continue
                lexer = shlex.shlex(instruction[4:], posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                words = list(lexer)
                found += [f"{name}: shell word {w!r}" for w in words if w.startswith(MARK) or w.startswith(f"$({MARK}")]
        if name.endswith((".yml", ".yaml")):
            found += [f"{name}: YAML key {k!r}" for k in _yaml_keys(yaml.safe_load(text)) if MARK in str(k)]
        if name.endswith(".hcl"):
            code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
            found += [f"{name}: HCL template {m}" for m in re.findall(rf"(?<!\$)\$\{{{MARK}|(?<!%)%\{{{MARK}", code)]
    return found


def test_the_injection_finder_finds_injections() -> None:
    """What the unquoted renderer wrote before: each of these is found."""
    assert injected({"Dockerfile": f'LABEL a="1\n{MARK} RUN id"'})
    assert injected({"Dockerfile": f"RUN apt-get install -y git; {MARK} now"})
    assert injected({"Dockerfile": f"RUN MAX_JOBS=1 X=$({MARK}) pip wheel ."})
    assert injected({"environment.yml": f"name: x\n{MARK}: true\n"})
    assert injected({"docker-bake.hcl": f'tags = ["x:${{{MARK}}}"]'})
    assert not injected({"Dockerfile": f"RUN X='on; {MARK}' pip wheel .", "e.yml": f'name: "x\\n{MARK}: 1"'})


def _yaml_keys(node: object) -> list[object]:
    if isinstance(node, dict):
        return [*node.keys(), *(k for v in node.values() for k in _yaml_keys(v))]
    if isinstance(node, list):
        return [k for v in node for k in _yaml_keys(v)]
    return []


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: p.stem)
def test_render_without_validation_injects_nothing(path: Path) -> None:
    stack = unchecked_stack(path)
    try:
        files = render_unchecked(stack)
    except SpecError as exc:  # refused at render: nothing written, one line
        assert "\n" not in str(exc) and TOKEN not in str(exc)
        return
    assert injected(files) == []
    assert not any(TOKEN in text for text in files.values())


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: p.stem)
def test_lock_plan_without_validation_hands_uv_only_requirements(path: Path) -> None:
    stack = unchecked_stack(path)
    try:
        requests = [r for f in expand_flavours(stack) for p in [flavour_requests(stack, f)] for r in [p.full, *p.layers.values()]]
        for request in requests:
            check_request(request)
    except (SpecError, LockError, TrainstackError) as exc:
        assert "\n" not in str(exc) and TOKEN not in str(exc)
        return
    for request in requests:
        assert not any(MARK in line or line.lstrip().startswith("-") for line in request.requirements)


def test_quoting_keeps_accepted_values_in_their_place() -> None:
    """Values check accepts (build_env may hold ';' as in '8.0;9.0') stay one shell word."""
    text = (CORPUS / "hostile" / "build-env-key.toml").read_text(encoding="utf-8")
    text = text.replace(f'"X=1 {MARK}" = "on"', f'TS_FLAG = "on; {MARK}", TS_OTHER = "$({MARK})", TS_THIRD = "`{MARK}`"')
    path = CORPUS.parent / "corpus-accepted.toml"
    try:
        path.write_text(text, encoding="utf-8")
        stack = load_stack(path)
    finally:
        path.unlink()
    files = render_unchecked(stack)
    assert injected(files) == []
    dockerfile = files["cpu-debian12-py311-release/Dockerfile"]
    assert f"TS_FLAG='on; {MARK}' TS_OTHER='$({MARK})' TS_THIRD='`{MARK}`'" in dockerfile
    # SC2016 (info: '$(...)' does not expand in single quotes) is the point here; nothing above info
    lint = ["hadolint", "--no-color", "--failure-threshold", "warning", "-"]
    result = subprocess.run(lint, input=dockerfile, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- no process started from a stack value ----

PLANTED_SETUP = """\
from pathlib import Path
Path({marker!r}).write_text("ran")
from setuptools import setup
setup(name="planted", version="1.0")
"""


@pytest.fixture()
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A project beside the stack folder whose setup.py leaves a marker when anything builds it."""
    marker = tmp_path / "marker"
    project = tmp_path / "planted"
    project.mkdir()
    (project / "setup.py").write_text(PLANTED_SETUP.format(marker=str(marker)), encoding="utf-8")
    (project / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n', encoding="utf-8")
    (tmp_path / "stacks").mkdir()
    return project, marker


def test_no_stack_value_builds_a_planted_project(planted: tuple[Path, Path], tmp_path: Path) -> None:
    project, marker = planted
    base = (CORPUS / "hostile" / "name-path.toml").read_text(encoding="utf-8")
    attacks = {
        "name": f'"../planted" = ">=1"',
        "requires": f'pkg = {{ version = "==1.0", source = "sdist", requires = ["planted @ {project.as_uri()}"] }}',
        "toolchain": None,
        "path": 'pkg = { path = "../planted", requires = ["idna"] }',
        "extras": 'pkg = { version = ">=1", extras = ["x]\\n-e ../planted\\n#"] }',
        "version": 'pkg = "==1.0\\n-e ../planted"',
    }
    for name, line in attacks.items():
        text = base.replace(f'"../../{MARK}" = ">=1"', line or "")
        if line is None:
            text = text.replace('packages = ["setuptools"]', f'packages = ["-e {project}"]')
        stack = tmp_path / "stacks" / f"{name}.toml"
        stack.write_text(text, encoding="utf-8")
        for verb in ("check", "lock"):
            result = _run_cli(verb, str(stack))
            assert_no_traceback(result.stderr)
            assert result.returncode != 0, (name, verb, result.stderr)
        # and with validation bypassed, the lock refuses before uv starts
        unchecked = unchecked_stack(stack)
        with pytest.raises((LockError, SpecError)):
            for flavour in expand_flavours(unchecked):
                plan = flavour_requests(unchecked, flavour)
                for source in plan.sources.values():
                    pin_source(source, stack.parent, str(stack))
                for request in [plan.full, *plan.layers.values()]:
                    compile_request(request, previous=None, constraints=None, upgrade=(), header="x", component_names=[])
    assert not marker.exists()


def test_git_upload_pack_never_reaches_git(tmp_path: Path) -> None:
    marker = tmp_path / "upload-pack-ran"
    hostile = f"--upload-pack=touch {marker};"
    component = Component.model_construct(name="tsdemo", git=hostile, commit="0" * 40, path=None, build_env={}, extras=[])
    with pytest.raises(LockError):
        pin_source(component, tmp_path, "stack.toml")
    with pytest.raises(TrainstackError):
        fetch_git(Steps(tmp_path / "build", retries=1), component, tmp_path / "src")
    # and '--' keeps git from reading such a URL as an option, had it got that far
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", "--", hostile, tmp_path / "clone"], capture_output=True)
    assert not marker.exists()

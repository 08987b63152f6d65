"""tests/corpus: hostile inputs aimed at the stack's [env] (env_*), the extension cache (cache_*)
and private index credentials (index_*), each driven through the real verbs (the trainstack
command line in a process of its own, bounded in time and memory) beside the note (.attacks) that
says what it attacks and what must hold.

Every case asserts: no traceback; exit and wall time within bounds, peak memory under MEMORY; no
marker of code that ran; no planted token or password in any output or any file; nothing written
outside the folders the verb owns; no process of the verb left once it ends.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.build_fixtures import git_package
from tests.clirun import assert_no_traceback
from tests.loopback import WheelIndex, serve
from tests.stacks import demo_stack
from tests.wheels import demo_wheel, wheel
from trainstack.builder.activation import activation_block
from trainstack.cli import main
from trainstack.errors import SpecError
from trainstack.indexauth import name_indexes
from trainstack.trust import VARIABLES, credential_name, holds_userinfo, runs_code

CORPUS = Path(__file__).resolve().parent / "corpus"
ENV_CASES = sorted(CORPUS.glob("env_*.toml"))
CACHE_CASES = sorted(CORPUS.glob("cache_*.toml"))
INDEX_CASES = sorted(CORPUS.glob("index_*.env"))
MARK = Path("/tmp/trainstack-corpus-env-marker")  # what the env_* payloads would create if run
TOKEN = "SECRET-CORPUS-TOKEN-ENV"
MEMORY_KIB = 1 << 20  # 1 GiB of resident memory, the largest process of a verb
SECONDS = 20.0  # a refusal
BUILD_SECONDS = 120.0  # a venv build from warm caches
pytestmark = pytest.mark.timeout(300)


def note(case: Path) -> dict[str, str]:
    """The case's .attacks note: 'attacks:', 'holds:' and 'expect:' (or 'expect-ok:') lines."""
    text = case.with_suffix(".attacks").read_text(encoding="utf-8")
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    assert text.startswith("attacks: ") and "holds" in fields and ("expect" in fields or "expect-ok" in fields), case
    return fields


def test_every_case_has_its_note() -> None:
    assert len(ENV_CASES) >= 15 and len(CACHE_CASES) >= 6 and len(INDEX_CASES) >= 3
    for case in ENV_CASES + CACHE_CASES + INDEX_CASES:
        note(case)
    notes = {p.stem for p in CORPUS.glob("*.attacks") if p.stem.startswith(("env_", "cache_", "index_"))}
    assert notes == {p.stem for p in ENV_CASES + CACHE_CASES + INDEX_CASES}


@dataclass
class Run:
    rc: int
    out: str
    err: str
    seconds: float
    maxrss_kib: int

    @property
    def errors(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error:")]


def cli(*argv: str, env: dict[str, str] | None = None, timeout: float = SECONDS, cwd: Path | None = None) -> Run:
    """``trainstack ARGV`` in a session of its own: its exit, output, wall time and peak memory
    (its own or its largest waited-for descendant's); fails if any process of it is left."""
    out_path, err_path = (Path(os.environ.get("TMPDIR", "/tmp")) / f"corpus-{uuid.uuid4().hex}.{n}" for n in ("out", "err"))
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "trainstack", *argv], stdout=out, stderr=err, cwd=cwd,
                                 env={**os.environ, **(env or {})}, start_new_session=True)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                os.killpg(child.pid, signal.SIGKILL)
                pytest.fail(f"trainstack {' '.join(argv)} ran past {timeout} s")
            time.sleep(0.05)
        seconds = time.monotonic() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    try:
        os.killpg(child.pid, 0)
        left = True
    except ProcessLookupError:
        left = False
    assert not left, f"trainstack {' '.join(argv)} left a process behind"
    run = Run(child.returncode, out_path.read_text(errors="replace"), err_path.read_text(errors="replace"), seconds,
              usage.ru_maxrss)
    out_path.unlink()
    err_path.unlink()
    assert_no_traceback(run.out + run.err)
    assert run.maxrss_kib < MEMORY_KIB, f"{run.maxrss_kib} KiB"
    return run


def files_holding(root: Path, *needles: str) -> list[str]:
    """Every regular file under ``root`` (links not followed) that holds one of ``needles``."""
    wanted = [n.encode() for n in needles]
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            try:
                if path.is_symlink() or not path.is_file():
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if any(n in data for n in wanted):
                found.append(str(path))
    return found


# ---- env_*: the stack's [env] --------------------------------------------------------------


def env_stack(folder: Path, case: Path) -> Path:
    folder.mkdir(parents=True)
    stack = folder / "stack.toml"
    stack.write_text(demo_stack("corpus-env", "http://127.0.0.1:9/simple", tail="\n" + case.read_text(encoding="utf-8")))
    return stack


@pytest.fixture(scope="module")
def env_checks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Run]]:
    """`trainstack check` of every env_* case, each in a process of its own, four at a time."""
    MARK.unlink(missing_ok=True)
    root = tmp_path_factory.mktemp("env")
    stacks = {case.stem: env_stack(root / case.stem, case) for case in ENV_CASES}
    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(lambda name: (name, (stacks[name], cli("check", str(stacks[name])))), sorted(stacks)))


@pytest.mark.parametrize("case", ENV_CASES, ids=lambda p: p.stem)
def test_env_case(case: Path, env_checks: dict[str, tuple[Path, Run]], capsys: pytest.CaptureFixture[str]) -> None:
    """check refuses (or, allowed by name, shows as runs:) in a process of its own; lock and build,
    in this one, refuse the same way before anything runs."""
    fields = note(case)
    stack, check = env_checks[case.stem]
    assert check.seconds < SECONDS and TOKEN not in check.out + check.err, check.err
    if "expect-ok" in fields:
        assert check.rc == 0 and fields["expect-ok"] in check.out, check.out
        assert "sets: env NCCL_DEBUG=WARN" in check.out
    else:
        assert check.rc == 2 and len(check.errors) == 1, check.err
        assert check.errors[0].startswith(f"error: {stack}:") and fields["expect"] in check.errors[0], check.errors
        for argv in (["lock", str(stack)], ["build", str(stack), "--backend", "venv", "--build-dir", str(stack.parent / "build")]):
            capsys.readouterr()
            start = time.monotonic()
            assert main(argv) == 2 and time.monotonic() - start < SECONDS
            captured = capsys.readouterr()
            errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
            assert_no_traceback(captured.err)
            assert len(errors) == 1 and fields["expect"] in errors[0], (argv, captured.err)
            assert TOKEN not in captured.out + captured.err
    assert sorted(p.name for p in stack.parent.iterdir()) == ["stack.toml"]  # no lock, no build folder
    assert not MARK.exists()


def test_one_list_with_a_reason_each_shared_by_build_env_and_env() -> None:
    """code_variables.toml: every entry has a reason and appears once; the families hold."""
    import tomllib

    data = tomllib.loads(VARIABLES.read_text(encoding="utf-8"))
    for kind in ("runs", "credential", "reserved"):
        patterns = [entry["pattern"] for entry in data[kind]]
        assert len(patterns) == len(set(patterns)) and all(len(entry["reason"]) > 3 for entry in data[kind]), kind
    for name in ("LD_PRELOAD", "PYTHONSTARTUP", "BASH_ENV", "PROMPT_COMMAND", "PS1", "LESSOPEN", "OPENSSL_CONF",
                 "CUDA_INJECTION64_PATH", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NVCC_PREPEND_FLAGS", "XDG_CONFIG_HOME",
                 "CFLAGS", "LDFLAGS", "MAKEFLAGS", "CMAKE_CUDA_COMPILER_LAUNCHER", "CUDACXX", "VIMINIT", "HISTFILE", "LESSKEYIN",
                 "SYSTEMD_PAGER", "SUDO_EDITOR", "MANOPT", "NVTX_INJECTION64_PATH", "NCCL_CONF_FILE", "OMPI_MCA_plm_rsh_agent",
                 "TRITON_CACHE_MANAGER", "TORCH_HOME", "XDG_CACHE_HOME", "CCACHE_DIR", "SSLKEYLOGFILE", "TMP"):
        assert runs_code(name), name
    for name in ("NCCL_SOCKET_IFNAME", "CUDA_MODULE_LOADING", "TOKENIZERS_PARALLELISM", "OMP_NUM_THREADS", "NCCL_DEBUG",
                 "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "OMPI_MCA_btl", "DS_BUILD_OPS", "CUDA_VISIBLE_DEVICES"):
        assert runs_code(name) is None and credential_name(name) is None, name
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "WANDB_API_KEY", "DB_PASSWORD", "GH_TOKEN_FILE"):
        assert credential_name(name), name
    for value, held in [("u:p@proxy:3128", True), ("http://proxy:3128", False), ("https://t@h/x", True),
                        ("a,https://u:p@h", True), ("ops@example.com", False), ("http://h/p?q=a@b", False)]:
        assert holds_userinfo(value) is held, value


def test_build_env_shares_the_list_and_check_shows_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = Path(__file__).parent / "data" / "corpus" / "hostile" / "build-env-ld-library-path.toml"
    stack = tmp_path / "stack.toml"
    text = hostile.read_text().replace("min_free_disk_gb = 1\n", 'min_free_disk_gb = 1\nallow_env = ["LD_LIBRARY_PATH"]\n')
    stack.write_text(text)
    assert main(["check", str(stack)]) == 0
    assert ("runs: components.tsdemo.build_env: LD_LIBRARY_PATH=/tmp/INJECTED (allowed by [build] allow_env: the dynamic "
            "loader preloads") in capsys.readouterr().out
    stack.write_text(text.replace('build_env = { ', 'build_env = { NVCC_PREPEND_FLAGS = "-ccbin /tmp/INJECTED", '))
    assert main(["check", str(stack)]) == 2
    assert "build_env.NVCC_PREPEND_FLAGS: 'NVCC_PREPEND_FLAGS' makes the build's processes" in capsys.readouterr().err
    stack.write_text(text.replace('build_env = { ', f'build_env = {{ AWS_ACCESS_KEY_ID = "{TOKEN}", '))
    assert main(["check", str(stack)]) == 2
    err = capsys.readouterr().err
    assert "AWS_ACCESS_KEY_ID: a credential's name" in err and TOKEN not in err


def test_the_activation_refuses_its_own_names_even_unchecked() -> None:
    """A stack built without validation (model_construct) still cannot write a saved-value name."""
    for name in ("_TRAINSTACK_HAD_NCCL_DEBUG", "_OLD_VIRTUAL_PATH", "VIRTUAL_ENV"):
        with pytest.raises(SpecError, match="keeps to itself"):
            activation_block({"NCCL_DEBUG": "WARN", name: "x"})


# ---- cache_*: the extension cache ------------------------------------------------------------

SLUG = "cpu-debian12-py311-release"
CACHE_STACK = """\
[stack]
name = "corpus-cache"
release = "2026.12.0"
image = "trainstack/corpus-cache"

[components]
tsdemo = {{ git = "{url}", commit = "{sha}" }}

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11"]

[build]
base = {{ debian12 = "debootstrap:bookworm" }}
min_free_disk_gb = 0
retries = 1
compiler_cache = {{ kind = "none" }}

[toolchain]
packages = ["setuptools", "wheel"]
nvcc = false
"""


@dataclass
class CacheBench:
    stack: Path
    build: Path
    pristine: Path  # a copy of build/.extensions after the first build
    outside: Path
    marker: Path


@pytest.fixture(scope="module")
def cache_bench(tmp_path_factory: pytest.TempPathFactory) -> CacheBench:
    root = tmp_path_factory.mktemp("cache")
    url, sha = git_package(root, "tsdemo")
    stack = root / "stack.toml"
    stack.write_text(CACHE_STACK.format(url=url, sha=sha))
    assert cli("lock", str(stack), timeout=BUILD_SECONDS).rc == 0
    build = root / "build"
    first = cli("build", str(stack), "--backend", "venv", "--build-dir", str(build), timeout=BUILD_SECONDS)
    assert first.rc == 0, first.err[-2000:]
    pristine = root / "pristine"
    shutil.copytree(build / ".extensions", pristine, symlinks=True)
    assert len(_entries(pristine)) == 1
    return CacheBench(stack, build, pristine, root / "outside", root / "pth-ran")


def _entries(extensions: Path) -> list[Path]:
    return [p for p in extensions.glob("tsdemo-*") if "." not in p.name]  # not .partial, .lock or .tmp


def _evil(project: str, version: str, marker: Path) -> tuple[str, bytes]:
    """A real wheel whose .pth runs at every Python start and leaves ``marker``."""
    module = project.replace("-", "_")
    return wheel(project, version, {f"{module}.py": "VALUE = 666\n",
                                    f"{module}_corpus.pth": f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n"})


def plant(bench: CacheBench, how: str) -> None:
    extensions = bench.build / ".extensions"
    entry = _entries(extensions)[0]
    if how == "swap-wheel":
        cached = next(entry.glob("*.whl"))
        name, data = _evil("tsdemo", "0.1.0", bench.marker)
        cached.write_bytes(data)
    elif how in ("foreign-wheel", "record-names-foreign"):
        name, data = _evil("corpus-evil", "1.0", bench.marker)
        (entry / name).write_bytes(data)
        if how == "record-names-foreign":
            import hashlib

            record = json.loads((entry / "build.json").read_text())
            record.update(wheel=name, sha256=hashlib.sha256(data).hexdigest())
            (entry / "build.json").write_text(json.dumps(record))
    elif how == "deep-record":
        (entry / "build.json").write_text("[" * 100_000 + "]" * 100_000)
    elif how == "link-build-lock":  # the flavour's lock file, which a build opens for writing
        victim = bench.outside / "victim.txt"
        victim.write_text("intact\n")
        lock = bench.build / f".{SLUG}.lock"
        lock.unlink(missing_ok=True)
        lock.symlink_to(victim)
    elif how == "link-build-staging":  # the flavour's staging folder, which a build empties and fills
        (bench.outside / "staging").mkdir()
        (bench.outside / "staging" / "kept.txt").write_text("intact\n")
        (bench.build / f".{SLUG}.staging").symlink_to(bench.outside / "staging")
    elif how == "link-extensions":
        shutil.copytree(extensions, bench.outside / "extensions", symlinks=True)
        shutil.rmtree(extensions)
        extensions.symlink_to(bench.outside / "extensions")
    elif how == "link-partial":
        shutil.rmtree(entry)
        (bench.outside / "partial").mkdir()
        entry.with_name(entry.name + ".partial").symlink_to(bench.outside / "partial")
    elif how == "link-partial-lock":
        shutil.rmtree(entry)
        lock = entry.with_name(entry.name + ".partial.lock")  # the first build left the real one
        lock.unlink(missing_ok=True)
        lock.symlink_to(bench.outside / "made-through-the-link")
    elif how == "planted-partial":
        shutil.rmtree(entry)  # a miss: built through the kept folder
        _stop_at_compile(bench)
        [kept] = extensions.glob("tsdemo-*.partial")
        lib = kept / "src" / "build" / "lib"  # what setuptools packs into the wheel unless its source is newer
        lib.mkdir(parents=True)
        (lib / "tsdemo.py").write_text("VALUE = 666\n")
        (lib / "tsdemo_corpus.pth").write_text(f"import pathlib; pathlib.Path({str(bench.marker)!r}).touch()\n")
    else:
        raise AssertionError(how)


def _stop_at_compile(bench: CacheBench) -> None:
    """A build that stops at its compile step (a uv whose 'uv build' fails, first on PATH; not a
    compiler, so the kept folder's record of the compilers is the same), leaving the kept folder."""
    failing = bench.build.parent / "failing-uv"
    failing.mkdir(exist_ok=True)
    (failing / "uv").write_text(f'#!/bin/sh\n[ "$1" = build ] && exit 3\nexec {shutil.which("uv")} "$@"\n')
    (failing / "uv").chmod(0o755)
    run = cli("build", str(bench.stack), "--backend", "venv", "--build-dir", str(bench.build), timeout=BUILD_SECONDS,
              env={"PATH": f"{failing}{os.pathsep}{os.environ['PATH']}"})
    assert run.rc != 0 and "compile-tsdemo" in run.err, run.err[-2000:]


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): (p.lstat().st_size if not p.is_dir() else -1) for p in folder.rglob("*")}


@pytest.mark.python("3.11")  # builds a py311 flavour
@pytest.mark.parametrize("case", CACHE_CASES, ids=lambda p: p.stem)
def test_cache_case(case: Path, cache_bench: CacheBench) -> None:
    import tomllib

    fields, how = note(case), tomllib.loads(case.read_text())["plant"]
    bench = cache_bench
    shutil.rmtree(bench.build / SLUG, ignore_errors=True)  # built again, from the cache
    for planted in (bench.build / f".{SLUG}.lock", bench.build / f".{SLUG}.staging"):
        if planted.is_symlink():
            planted.unlink()
    extensions = bench.build / ".extensions"
    if extensions.is_symlink():
        extensions.unlink()
    shutil.rmtree(extensions, ignore_errors=True)
    shutil.copytree(bench.pristine, extensions, symlinks=True)
    shutil.rmtree(bench.outside, ignore_errors=True)
    bench.outside.mkdir()
    bench.marker.unlink(missing_ok=True)
    plant(bench, how)
    before = _listing(bench.outside)
    run = cli("build", str(bench.stack), "--backend", "venv", "--build-dir", str(bench.build), timeout=BUILD_SECONDS)
    assert _listing(bench.outside) == before  # nothing written, removed or made outside
    venv = bench.build / SLUG / "venv" / "bin" / "python"
    if how.startswith("link-"):
        assert run.rc != 0 and len(run.errors) == 1 and fields["expect"] in run.errors[0], run.err[-2000:]
        assert not venv.exists()
    else:
        outcome, _, said = fields["expect"].partition(": ")  # 'hit', or 'miss: <what the build says>'
        assert run.rc == 0 and said in run.err, run.err[-3000:]
        value = subprocess.run([venv, "-c", "import tsdemo; print(tsdemo.VALUE)"], capture_output=True, text=True, timeout=60)
        assert value.stdout.strip() == "42", value.stderr
        record = json.loads((bench.build / SLUG / "build.json").read_text())["extensions"]["tsdemo"]
        assert record["cache"] == outcome
    assert not bench.marker.exists()  # no .pth of a planted wheel ran


# ---- index_*: private index credentials ------------------------------------------------------

USER = "corpus-ci"
SECRET_TAIL = f"tail-{uuid.uuid4().hex}"
PASSWORD = f"p@ss-{SECRET_TAIL}"  # an '@' of its own: URL parsers split userinfo at the last one


class AuthIndex(WheelIndex):
    """demo-pkg behind basic auth with USER:PASSWORD."""

    project = "demo-pkg"
    wheels = dict([demo_wheel("1.0")])

    def admit(self) -> bool:
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") == expected:
            return True
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="corpus"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False


def pieces() -> list[str]:
    """What must never be shown: the password, its tail after its '@', both percent-encoded, and
    the basic-auth header value."""
    return [PASSWORD, SECRET_TAIL, quote(PASSWORD, safe=""), base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()]


@pytest.fixture()
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    for var in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX"):
        monkeypatch.delenv(var, raising=False)
    with serve(AuthIndex) as url:
        yield url


def index_env(case: str, url: str) -> dict[str, str]:
    template = (CORPUS / f"{case}.env").read_text(encoding="utf-8")
    host = url.removeprefix("http://").split("/", 1)[0]
    text = template.format(user=USER, password=PASSWORD, host=host, prefix=name_indexes([url])[0].env_prefix.removeprefix("UV_INDEX_"))
    return dict(line.split("=", 1) for line in text.splitlines() if line)


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_index_password_at_sign(index: str, tmp_path: Path) -> None:
    note(CORPUS / "index_password_at_sign.env")
    stack = tmp_path / "private.toml"
    stack.write_text(demo_stack("private", index).replace(f'url = "{index}"', ""))
    env = index_env("index_password_at_sign", index)
    lock = cli("lock", str(stack), env=env, timeout=BUILD_SECONDS)
    build = cli("build", str(stack), "--backend", "venv", "--build-dir", str(tmp_path / "build"), env=env, timeout=BUILD_SECONDS)
    assert lock.rc == 0 and build.rc == 0, lock.err[-1500:] + build.err[-1500:]
    assert f"--index-url {index}" in (tmp_path / "private.lock" / "locks" / f"{SLUG}.txt").read_text()
    shown = lock.out + lock.err + build.out + build.err
    assert [p for p in pieces() if p in shown] == [] and files_holding(tmp_path, *pieces()) == []


def test_index_wrong_password_at_sign(index: str, tmp_path: Path) -> None:
    note(CORPUS / "index_wrong_password_at_sign.env")
    stack = tmp_path / "private.toml"
    stack.write_text(demo_stack("private", index).replace(f'url = "{index}"', ""))
    lock = cli("lock", str(stack), env=index_env("index_wrong_password_at_sign", index), timeout=BUILD_SECONDS)
    assert lock.rc != 0 and len(lock.errors) == 1, lock.err[-2000:]
    shown = lock.out + lock.err
    assert [p for p in pieces() + ["wrong@"] if p in shown] == [] and files_holding(tmp_path, *pieces()) == []


def test_index_password_in_output(index: str, tmp_path: Path) -> None:
    """One masking pass over every line a console writes and every JSON result."""
    fields = note(CORPUS / "index_password_in_output.env")
    stack = tmp_path / "private.toml"
    stack.write_text(demo_stack("private", index, tail=f'\n[verify]\nsuite = [{{ name = "unit", command = "pytest -k {PASSWORD}" }}]\n'))
    env = index_env("index_password_in_output", index)
    text = cli("check", str(stack), env=env)
    document = cli("check", str(stack), "--json", env=env)
    written = cli("check", str(stack), "-o", str(tmp_path / "check.json"), env=env)
    assert text.rc == document.rc == written.rc == 0, text.err
    assert f"pytest -k {fields['expect']}" in text.out
    assert json.loads(document.out)["runs"]["suites"][0]["command"] == f"pytest -k {fields['expect']}"
    assert json.loads((tmp_path / "check.json").read_text())["runs"] == json.loads(document.out)["runs"]
    shown = text.out + text.err + document.out + document.err + written.out + written.err
    assert [p for p in pieces() if p in shown] == [] and files_holding(tmp_path, *pieces()) == [str(stack)]


# a base image of the host's own bash and sleep: its apt-get says whether the netrc secret is
# mounted, then waits, so that the image step is running when the build is killed
APT_GET = """#!{bash}
if [ -s /root/.netrc ]; then echo CORPUS-NETRC-MOUNTED; fi
echo CORPUS-APT-STARTED
exec sleep 300
"""
BASE = "localhost/trainstack-corpus-sh:latest"


def _base_image(work: Path, buildah: list[str]) -> None:
    from trainstack.builder.oci import ulimit_options

    root = work / "rootfs"
    programs = [shutil.which("bash"), shutil.which("sleep")]
    libs = subprocess.run(["ldd", *programs], capture_output=True, text=True, check=True).stdout.split()
    for path in {*programs, *(w for w in libs if w.startswith("/") and not w.endswith(":"))}:
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    (root / "bin").mkdir(parents=True, exist_ok=True)
    if not (root / "bin/sh").exists():
        (root / "bin/sh").symlink_to(shutil.which("bash"))  # RUN's shell in an OCI-format image
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/apt-get").write_text(APT_GET.format(bash=shutil.which("bash")))
    (root / "usr/bin/apt-get").chmod(0o755)
    (root / "root").mkdir()
    container = subprocess.run([*buildah, "from", *ulimit_options(), "scratch"], capture_output=True, text=True, check=True).stdout.strip()
    try:
        subprocess.run([*buildah, "copy", container, str(root), "/"], capture_output=True, check=True)
        subprocess.run([*buildah, "commit", "-q", container, BASE], capture_output=True, check=True)
    finally:
        subprocess.run([*buildah, "rm", container], capture_output=True)


def _netrc_processes(mark: str) -> list[int]:
    """Processes whose environment carries ``mark`` (the killed build's TMPDIR)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not shutil.which("buildah"), reason="needs buildah")
def test_index_netrc_kill9(index: str, containers_store: Path, tmp_path: Path) -> None:
    from trainstack.builder.oci import BuildahBackend

    note(CORPUS / "index_netrc_kill9.env")
    buildah = ["buildah", "--storage-driver", BuildahBackend().driver]
    _base_image(tmp_path / "base", buildah)
    stack = tmp_path / "private.toml"
    stack.write_text(demo_stack("private", index).replace("debootstrap:bookworm", BASE))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**index_env("index_netrc_kill9", index), "TMPDIR": str(temporary)}
    assert cli("lock", str(stack), env=env, timeout=BUILD_SECONDS).rc == 0
    build = tmp_path / "build"
    said = tmp_path / "build.err"
    with open(said, "wb") as err:
        child = subprocess.Popen([sys.executable, "-m", "trainstack", "build", str(stack), "--backend", "oci", "--build-dir", str(build)],
                                 env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        log = ""
        while "CORPUS-APT-STARTED" not in log:
            assert child.poll() is None and time.monotonic() < deadline, f"the image step never started: {said.read_text()[-2000:]}"
            time.sleep(0.2)
            log = "".join(p.read_text(errors="replace") for p in build.glob(".*staging/logs/*image*.log"))
        assert "CORPUS-NETRC-MOUNTED" in log  # the credentials did reach the step
        running = files_holding(tmp_path, *pieces()) + files_holding(containers_store, *pieces())
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        killed = files_holding(tmp_path, *pieces()) + files_holding(containers_store, *pieces())
        assert running == [] and killed == []
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        for pid in _netrc_processes(str(temporary)):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _netrc_processes(str(temporary)) and time.monotonic() < deadline:
            time.sleep(0.2)
        subprocess.run([*buildah, "rm", "--all"], capture_output=True)
        subprocess.run([*buildah, "rmi", "--force", BASE], capture_output=True)
    assert _netrc_processes(str(temporary)) == []
    assert files_holding(tmp_path, *pieces()) == [] and files_holding(containers_store, *pieces()) == []


@pytest.mark.skipif(not shutil.which("ccache") or not shutil.which("gcc"), reason="needs ccache and gcc")
def test_a_ccache_conf_planted_in_the_compiler_cache_runs_nothing(tmp_path: Path) -> None:
    """The compiler cache lies in the build folder (or the stack's): a ccache.conf planted there
    whose prefix_command names a program would run it at every compile of every extension build.
    With the environment a build compiles in, ccache reads no configuration from that folder."""
    from trainstack.buildenv import compiler_cache_env
    from trainstack.stackfile.schema import CompilerCache

    build = tmp_path / "build"
    env = compiler_cache_env(CompilerCache(kind="ccache"), build, launcher=False)
    cache = Path(env["CCACHE_DIR"])
    cache.mkdir(parents=True)
    marker = tmp_path / "prefix-ran"
    planted = tmp_path / "planted"
    planted.write_text(f'#!/bin/sh\ntouch {marker}\nexec "$@"\n')
    planted.chmod(0o755)
    (cache / "ccache.conf").write_text(f"prefix_command = {planted}\n")
    (tmp_path / "unit.c").write_text("int unit(void) { return 42; }\n")
    compile_ = ["ccache", "gcc", "-c", str(tmp_path / "unit.c"), "-o", str(tmp_path / "unit.o")]
    done = subprocess.run(compile_, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "unit.o").stat().st_size > 0 and not marker.exists()
    without = {k: v for k, v in env.items() if k != "CCACHE_CONFIGPATH"}  # the same folder, read as ccache reads it
    subprocess.run(compile_, env={**os.environ, **without, "CCACHE_RECACHE": "1"}, capture_output=True, timeout=60)
    assert marker.exists()  # the planted file is one ccache would obey

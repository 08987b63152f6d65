"""The CA bundle reaches an image build as buildah's ``--secret id=ca,src=PATH``, a value buildah
splits at ',' and '=': a path holding ',src=OTHER' mounts OTHER instead (shown here with real
buildah on a two-megabyte base made of dash). trainstack builds the value from checked parts only
and keeps ``build.ca_bundle`` inside the stack's folder or a system CA bundle, so check refuses
the injection, build refuses a folder whose name would carry one, and the file mounted is the
one named.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.build_fixtures import copy_example, make_lock
from tests.clirun import assert_no_traceback
from trainstack.builder.oci import ulimit_options, secret_option
from trainstack.cli import main
from trainstack.errors import SpecError

pytestmark = pytest.mark.timeout(300)
buildah_needed = pytest.mark.skipif(shutil.which("buildah") is None, reason="needs buildah")
DOCKERFILE = (
    "FROM localhost/ts-secret-base\n"
    "RUN --mount=type=secret,id=ca,target=/run/secrets/ca /bin/dash -c 'read -r l < /run/secrets/ca; echo \"$l\" > /seen'\n"
)


class Buildah:
    """buildah on a private store (vfs, chroot isolation), with a base image of dash and its libraries."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = ["--root", str(root / "store"), "--runroot", str(root / "run"), "--storage-driver", "vfs"]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["buildah", *self.store, *args], capture_output=True, text=True, timeout=120)

    def make_base(self) -> None:
        tree = self.root / "rootfs"
        (tree / "bin").mkdir(parents=True)
        shutil.copy2("/bin/dash", tree / "bin" / "dash")
        (tree / "bin" / "sh").symlink_to("dash")
        ldd = subprocess.run(["ldd", "/bin/dash"], capture_output=True, text=True, check=True).stdout
        for library in (word for word in ldd.split() if word.startswith("/")):
            target = tree / library.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(library).resolve(), target)
        with tarfile.open(self.root / "base.tar", "w") as tar:
            tar.add(tree, arcname=".")
        container = self("from", "scratch").stdout.strip()
        assert self("add", container, str(self.root / "base.tar"), "/").returncode == 0
        assert self("commit", "--quiet", container, "localhost/ts-secret-base").returncode == 0
        self("rm", container)

    def seen(self, secret: list[str], tag: str) -> str:
        """Build a RUN step with ``secret`` and return what it read at /run/secrets/ca."""
        context = self.root / tag
        context.mkdir()
        (context / "Dockerfile").write_text(DOCKERFILE)
        built = self("build", "--isolation", "chroot", *ulimit_options(), "--quiet", *secret, "-t", f"localhost/{tag}", str(context))
        assert built.returncode == 0, built.stderr
        container = self("from", "--quiet", *ulimit_options(), f"localhost/{tag}").stdout.strip()
        result = self("run", "--isolation", "chroot", container, "/bin/dash", "-c", "read -r l < /seen; echo $l")
        self("rm", container)
        return result.stdout.strip()


@pytest.fixture(scope="module")
def buildah(tmp_path_factory: pytest.TempPathFactory) -> Buildah:
    tool = Buildah(tmp_path_factory.mktemp("buildah"))
    tool.make_base()
    return tool


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    """A CA bundle inside a stack folder and a private key outside it."""
    (tmp_path / "stack").mkdir()
    ca = tmp_path / "stack" / "ca.pem"
    ca.write_text("CA-BUNDLE-CONTENT\n")
    key = tmp_path / "id_rsa"
    key.write_text("PRIVATE-KEY-CONTENT\n")
    return ca, key


@buildah_needed
def test_a_value_joined_as_text_mounts_another_file(buildah: Buildah, files: tuple[Path, Path]) -> None:
    """Why the parts are checked: what the backends wrote before (f'id=ca,src={ca_bundle}') mounts
    the file a second 'src=' names."""
    ca, key = files
    assert buildah.seen(["--secret", f"id=ca,src={ca},src={key}"], "joined") == "PRIVATE-KEY-CONTENT"


@buildah_needed
def test_the_checked_secret_mounts_the_bundle_named(buildah: Buildah, files: tuple[Path, Path]) -> None:
    ca, _ = files
    assert secret_option("ca", ca) == ["--secret", f"id=ca,src={ca}"]
    assert buildah.seen(secret_option("ca", ca), "checked") == "CA-BUNDLE-CONTENT"


@pytest.mark.parametrize(
    "path", ["/s/ca.pem,src=/root/.ssh/id_rsa", "/s/ca.pem,type=env", "/s/a=b/ca.pem", "ca.pem", "-ca.pem", "/s/ca\n.pem"]
)
def test_a_secret_path_that_could_carry_a_second_key_is_refused(path: str) -> None:
    with pytest.raises(SpecError, match="cannot be passed to the image builder") as info:
        secret_option("ca", path)
    assert "\n" not in str(info.value)
    with pytest.raises(SpecError):
        secret_option("ca,src", "/s/ca.pem")


def _check(stack: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check", str(stack)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        ("ca.pem,src={key}", "holds ',' or '='"),
        ("{key}", "leads out of the stack's folder"),
        ("~/.ssh/id_rsa", "leads out of the stack's folder"),
        ("~root/.ssh/id_rsa", "'~' may only start '~/'"),
        ("/etc/ssl/certs/../../hostname", "holds '..'"),
        ("sub/../../id_rsa", "climbs out of the stack's folder"),
        ("link.pem", "leads out of the stack's folder"),  # a link in the folder to the key
    ],
)
def test_check_refuses_a_ca_bundle_outside_the_folder(
    value: str, expect: str, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ca, key = files
    (ca.parent / "link.pem").symlink_to(key)
    stack = copy_example("cpu-minimal", ca.parent, {r"min_free_disk_gb = 1\n": f'min_free_disk_gb = 1\nca_bundle = "{value.format(key=key)}"\n'})
    code, err = _check(stack, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: {stack}:") and "build.ca_bundle: " in lines[0] and expect in lines[0], err
    assert "PRIVATE-KEY-CONTENT" not in err


def test_check_accepts_a_bundle_in_the_folder_and_the_system_one(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    ca, _ = files
    for value in ("ca.pem", str(ca), "/etc/ssl/certs/ca-certificates.crt"):
        if value.startswith("/etc") and not Path(value).is_file():
            continue
        stack = copy_example("cpu-minimal", ca.parent, {r"min_free_disk_gb = 1\n": f'min_free_disk_gb = 1\nca_bundle = "{value}"\n'})
        assert _check(stack, capsys)[0] == 0, value


@buildah_needed
def test_build_refuses_a_bundle_path_that_would_carry_a_key_before_buildah_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stack folder named 'x,src=...' passes check (ca_bundle = "ca.pem" is inside it); the
    image build still refuses the secret value before any base is made."""
    folder = tmp_path / "x,src=stolen"
    folder.mkdir()
    (folder / "ca.pem").write_text("CA\n")
    stack = copy_example("cpu-minimal", folder, {r"min_free_disk_gb = 1\n": 'min_free_disk_gb = 1\nca_bundle = "ca.pem"\n'})
    make_lock(stack)
    build = tmp_path / "build"
    assert main(["build", str(stack), "--backend", "oci", "--build-dir", str(build)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert_no_traceback(err)
    assert len(errors) == 1 and "build secret ca: the path" in errors[0], err
    assert "debootstrap" not in err

"""The stack's [env]: variables baked into the image (ENV, in the last stage) and the venv's
activation. Checked by their grammar (no credential, no loader variable unless allowed, printable
ASCII), rendered quoted, set by `source venv/bin/activate` of a real venv build from a loopback
index, shown by verify, and diffed by release between two releases."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.env_index import ENV, index, stack_text  # noqa: F401 (index: the loopback index fixture)
from trainstack.cli import main
from trainstack.lock.manifest import manifest_path

QUOTING = "it's \"$HOME\" \\ $(id) `id`"
SLUG = "cpu-debian12-py311-release"


@pytest.mark.parametrize(
    ("env", "build_extra", "expected"),
    [
        ('[env]\nHF_TOKEN = "abc"\n', "", "env: HF_TOKEN: a credential's name"),
        ('[env]\nWANDB_API_KEY = "abc"\n', "", "env: WANDB_API_KEY: a credential's name"),
        ('[env]\nLD_PRELOAD = "/opt/x.so"\n', "", "env.LD_PRELOAD: 'LD_PRELOAD' makes every program"),
        ('[env]\nLD_PRELOAD = "/opt/x.so"\n', 'allow_env = ["LD_PRELOAD"]', "set it only by naming it in [env] allow"),
        ('[env]\nallow = ["NCCL_DEBUG"]\nNCCL_DEBUG = "WARN"\n', "", "env.allow: 'NCCL_DEBUG' is not a variable [env] refuses"),
        ('[env]\n_TRAINSTACK_HAD_NCCL_DEBUG = "1"\n', "", "a name the venv's activation keeps to itself"),
        ('[env]\nNCCL_DEBUG = "two\\nlines"\n', "", "holds the control character"),
        ('[env]\nNCCL_DEBUG = "caf\u00e9"\n', "", "is not an environment value trainstack bakes in"),
        ('[env]\nMIRROR = "https://u:p@mirror.example/x"\n', "", "env: MIRROR: a URL or host with 'user:password@'"),
        ('[env]\nNCCL_DEBUG = "' + "x" * 2001 + '"\n', "", "at most 2000 characters"),
        ('[env]\n"9LIVES" = "1"\n', "", "is not an environment variable name"),
        ('[env]\nNCCL_DEBUG = 3\n', "", "env"),
        ("[env]\n" + "".join(f'V{n} = "1"\n' for n in range(201)), "", "201 variables, more than the 200 accepted"),
    ],
)
def test_bad_env_is_one_line_naming_file_line_and_field(tmp_path: Path, env: str, build_extra: str, expected: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "envs.toml"
    stack.write_text(stack_text(env=env, build_extra=build_extra))
    assert main(["check", str(stack)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"error: {stack}:") and expected in err[0], err


def test_a_loader_variable_named_in_allow_env_is_accepted_and_check_shows_every_variable(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "envs.toml"
    stack.write_text(stack_text(env='[env]\nallow = ["LD_LIBRARY_PATH"]\nLD_LIBRARY_PATH = "/opt/nccl/lib"\nNCCL_DEBUG = "WARN"\n'))
    assert main(["check", str(stack)]) == 0
    out = capsys.readouterr().out
    assert ("runs: env LD_LIBRARY_PATH=/opt/nccl/lib (allowed by [env] allow: the dynamic loader preloads, audits or "
            "searches the libraries it names (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH); the image's ENV and the venv's "
            "activation)") in out
    assert "sets: env NCCL_DEBUG=WARN (the image's ENV and the venv's activation)" in out
    assert main(["check", str(stack), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["runs"]["image_env"] == [
        {"variable": "LD_LIBRARY_PATH", "value": "/opt/nccl/lib", "runs": document["runs"]["image_env"][0]["runs"]},
        {"variable": "NCCL_DEBUG", "value": "WARN", "runs": None}]
    assert document["runs"]["image_env"][0]["runs"].startswith("the dynamic loader")


def image_env(instruction: str, context: Path, store: Path) -> dict[str, str]:
    """The environment of an image built by buildah from scratch with ``instruction``."""
    from trainstack.builder.oci import BuildahBackend, ulimit_options

    context.mkdir()
    (context / "Containerfile").write_text(f"FROM scratch\n{instruction}")
    buildah = ["buildah", "--storage-driver", BuildahBackend().driver]
    tag = "localhost/trainstack-env-test:latest"
    subprocess.run([*buildah, "build", "--isolation", "chroot", *ulimit_options(), "-t", tag, "-f", context / "Containerfile", context],
                   capture_output=True, check=True)
    try:
        config = json.loads(subprocess.run([*buildah, "inspect", "--type", "image", tag], capture_output=True,
                                           text=True, check=True).stdout)["OCIv1"]["config"]
    finally:
        subprocess.run([*buildah, "rmi", "--force", tag], capture_output=True)
    return dict(item.split("=", 1) for item in config.get("Env", []) if not item.startswith("PATH="))


@pytest.mark.python("3.11")  # builds a py311 flavour
def test_env_lock_render_build_activation_verify_and_release(index: str, tmp_path: Path, containers_store: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old" / "envs.toml"
    old.parent.mkdir()
    old.write_text(stack_text(index, release="1.0", env=ENV.format(ifname="eth0")))
    stack = tmp_path / "envs.toml"
    stack.write_text(stack_text(index, release="2.0", env=ENV.format(ifname="ib0")))
    assert main(["lock", str(old)]) == 0
    assert main(["lock", str(stack)]) == 0
    keys = [json.loads(manifest_path(p).read_text())["flavours"][SLUG]["cache_key"] for p in (old, stack)]
    assert keys[0] != keys[1]  # the variables are in the image: another value is another build

    assert main(["render", str(stack), "--out", str(tmp_path / "render")]) == 0
    dockerfile = (tmp_path / "render" / SLUG / "Dockerfile").read_text()
    final = dockerfile[dockerfile.index("FROM extras AS final"):]
    assert ('ENV NCCL_SOCKET_IFNAME="ib0" \\\n    CUDA_MODULE_LOADING="LAZY" \\\n'
            '    TRAINSTACK_TEST_QUOTING="it\'s \\"\\$HOME\\" \\\\ \\$(id) `id`"\n') in final
    assert "NCCL_SOCKET_IFNAME" not in dockerfile[:dockerfile.index("FROM extras AS final")]  # the torch layer unchanged
    if shutil.which("buildah"):  # buildah reads the ENV instruction back to the very values of the stack
        instruction = final[final.index("ENV NCCL_SOCKET_IFNAME"):]
        assert image_env(instruction, tmp_path / "context", containers_store) == {
            "NCCL_SOCKET_IFNAME": "ib0", "CUDA_MODULE_LOADING": "LAZY", "TRAINSTACK_TEST_QUOTING": QUOTING}

    build = tmp_path / "build"
    assert main(["build", str(stack), "--backend", "venv", "--build-dir", str(build)]) == 0
    venv = build / SLUG / "venv"
    shown = subprocess.run(
        ["bash", "-c", '. "$1" && printf "%s\\n" "$NCCL_SOCKET_IFNAME" "$CUDA_MODULE_LOADING" "$TRAINSTACK_TEST_QUOTING"',
         "bash", str(venv / "bin" / "activate")], capture_output=True, text=True, check=True).stdout
    assert shown == f"ib0\nLAZY\n{QUOTING}\n"

    out = tmp_path / "verify.json"
    capsys.readouterr()
    assert main(["verify", str(stack), "--build-dir", str(build), "--skip", "ops,linkcheck,suites", "-o", str(out)]) == 0
    summary = capsys.readouterr().out
    written = json.loads(out.read_text())
    assert [(e["name"], e["declared"], e["found"]) for e in written["environment"]] == [
        ("NCCL_SOCKET_IFNAME", "ib0", "ib0"), ("CUDA_MODULE_LOADING", "LAZY", "LAZY"),
        ("TRAINSTACK_TEST_QUOTING", QUOTING, QUOTING)]
    assert "environment ([env] of the stack)" in summary and "NCCL_SOCKET_IFNAME" in summary

    # a build older than the stack's [env]: verify says the activation differs and fails
    stack.write_text(stack_text(index, release="2.0", env=ENV.format(ifname="ib1")))
    assert main(["verify", str(stack), "--build-dir", str(build), "--skip", "ops,linkcheck,suites", "-o", str(out)]) != 0
    reasons = json.loads(out.read_text())["reasons"]
    assert "env: NCCL_SOCKET_IFNAME is 'ib1' in the stack's [env], the environment's activation sets 'ib0' (build the flavour again)" in reasons
    stack.write_text(stack_text(index, release="2.0", env=ENV.format(ifname="ib0")))

    (tmp_path / "none").mkdir()
    assert main(["release", str(stack), "--previous", str(manifest_path(old)), "--results", str(tmp_path / "none"),
                 "--out", str(tmp_path / "notes")]) == 0
    notes = (tmp_path / "notes" / "RELEASE.md").read_text()
    assert f"### Base image and build settings of {SLUG}" in notes
    assert "- env.NCCL\\_SOCKET\\_IFNAME: eth0 → ib0\n" in notes
    shutil.rmtree(build)  # a venv: do not leave it in the test's temp tree

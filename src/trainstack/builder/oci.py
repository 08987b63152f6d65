"""The oci backend: the rendered Dockerfile built by buildah (chroot isolation) or docker buildx.

A ``debootstrap:<suite>`` base is made from the distribution's archive with debootstrap and
imported as a local image first. The CA bundle is handed over as the build secret "ca", the
index credentials (from the environment, trainstack.indexauth) as the build secret "netrc",
read by the image builder from a variable of its own environment (``--secret id=netrc,env=...``):
no file of it is ever written, so none is left behind by a build killed at any point (SIGKILL
included), and it is in no layer.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import resource
import shutil
from pathlib import Path

from trainstack import proc
from trainstack.attest.provenance import sha256_file
from trainstack.attest.sbom import SBOM_LABEL, SBOM_PATH_IN_IMAGE, make_sbom
from trainstack.builder.backend import BuildJob, BuildOutput
from trainstack.builder.evidence import image_system, sbom_inputs
from trainstack.builder.steps import Steps
from trainstack.errors import BuildError, SpecError, ToolMissingError
from trainstack.fsutil import atomic_write_text
from trainstack.grammar import CONTROL, shown
from trainstack.indexauth import lock_index_urls, netrc_text
from trainstack.render.api import flavour_files
from trainstack.render.dockerfile import Base, base_for, stage_name

# run by the image's Python: every installed distribution, canonical name -> version, as one JSON line
LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json, re; print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): "
    "d.version for d in m.distributions() if d.metadata['Name']}))"
)
UBUNTU_SUITES = frozenset({"bionic", "focal", "jammy", "noble", "oracular", "plucky", "questing"})


def select_oci() -> BuildahBackend | DockerBackend:
    """buildah when installed, else docker buildx when a Docker daemon answers."""
    if shutil.which("buildah"):
        return BuildahBackend()
    if shutil.which("docker") and proc.run(["docker", "info", "--format", "{{.ServerVersion}}"], echo=False).ok:
        return DockerBackend()
    raise ToolMissingError(
        "--backend oci needs buildah, or docker with a running daemon: neither was found",
        hint="apt-get install buildah (or install Docker Engine with the buildx plugin and start it)",
    )


def debootstrap_mirror(suite: str) -> str:
    return "http://archive.ubuntu.com/ubuntu" if suite in UBUNTU_SUITES else "http://deb.debian.org/debian"


def build_args(job: BuildJob) -> dict[str, str]:
    return {f"{stage_name(key).upper().replace('-', '_')}_MAX_JOBS": str(n) for key, n in job.max_jobs.items()}


def write_context(job: BuildJob) -> Path:
    """The flavour's rendered build context (Dockerfile + lock files) under the staging directory."""
    layers = dataclasses.replace(job.layers, sources=()) if job.skip_sources else job.layers
    context = job.staging / "context"
    for name, text in flavour_files(job.inputs, layers).items():
        atomic_write_text(context / name, text)
    return context


SECRET_ID = re.compile(r"[a-z][a-z0-9_]*")


def secret_option(secret_id: str, path: str | Path) -> list[str]:
    """``--secret id=ID,src=PATH`` built from checked parts: the id a plain word, the path absolute
    and free of the ',' and '=' that would start another key of the value (src=, type=, env=), of
    control characters, and of a leading '-'. SpecError naming the path otherwise (exit 2)."""
    text = str(path)
    if not SECRET_ID.fullmatch(secret_id):
        raise SpecError(f"build secret id '{shown(secret_id)}' is not a plain word")
    if not text.startswith("/") or "," in text or "=" in text or CONTROL.search(text):
        raise SpecError(
            f"build secret {secret_id}: the path '{shown(text, 200)}' cannot be passed to the image builder "
            "(an absolute path without ',', '=' or control characters is needed)",
            hint="move the file to a path without them",
        )
    return ["--secret", f"id={secret_id},src={text}"]


NETRC_VARIABLE = "TRAINSTACK_NETRC_SECRET"  # in the image builder's environment only


def netrc_secret(job: BuildJob) -> tuple[list[str], dict[str, str]]:
    """``--secret id=netrc,env=TRAINSTACK_NETRC_SECRET`` for the build command and the environment
    that carries it to the image builder alone: the credentials of the lock's indexes found in the
    environment (none: an empty netrc). Nothing is written to disk."""
    default, extras = lock_index_urls(job.layers.full.options)
    text = netrc_text(([default] if default else []) + extras, os.environ)
    return ["--secret", f"id=netrc,env={NETRC_VARIABLE}"], {NETRC_VARIABLE: text}


def debootstrap_rootfs(steps: Steps, suite: str, work: Path) -> Path:
    """A minimal root filesystem of ``suite`` as a tar file (debootstrap needs root)."""
    proc.require("debootstrap")
    rootfs = work / "rootfs"
    steps.run(
        f"debootstrap-{suite}",
        ["debootstrap", "--variant=minbase", suite, rootfs, debootstrap_mirror(suite)],
        network=True,
    )
    tar = work / "rootfs.tar"
    steps.run("pack-base", ["tar", "-C", rootfs, "--numeric-owner", "-cf", tar, "."])
    shutil.rmtree(rootfs)
    return tar


# the matrix's arch as an OCI platform; x86_64 builds keep the builder's own default
OCI_PLATFORMS = {"aarch64": "linux/arm64"}


def platform_option(arch: str) -> list[str]:
    """['--platform', 'linux/arm64'] for an aarch64 flavour; [] for x86_64."""
    return ["--platform", OCI_PLATFORMS[arch]] if arch in OCI_PLATFORMS else []


# what buildah (1.39 and newer) raises a RUN step's open-files and process limits to unless told otherwise
BUILDAH_LIMIT = 1048576
# buildah 1.28 sets the process limit of a RUN step itself, and fails where it is asked for another
NPROC_FROM = (1, 39)


def ulimit_options() -> list[str]:
    """['--ulimit', 'nofile=H:H', ...] for each limit this process may not raise to buildah's own
    (a build inside a container: no CAP_SYS_RESOURCE and a hard limit below it, where every RUN
    step would fail with 'setting "RLIMIT_NOFILE" ... operation not permitted'); [] elsewhere."""
    limits = {"nofile": resource.RLIMIT_NOFILE, **({"nproc": resource.RLIMIT_NPROC} if buildah_version() >= NPROC_FROM else {})}
    options = []
    for name, kind in limits.items():
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY and hard < BUILDAH_LIMIT:
            options += ["--ulimit", f"{name}={hard}:{hard}"]
    return options


@functools.cache
def buildah_version_text() -> str:
    """buildah's version as it says it ('buildah version 1.39.3 (image-spec ...)': '1.39.3'); '' if unread."""
    words = proc.run(["buildah", "--version"], echo=False).stdout.split()
    return words[2] if len(words) > 2 else ""


def buildah_version() -> tuple[int, ...]:
    """buildah's version as numbers: (1, 39, 3); () if unread."""
    return tuple(int(n) for n in buildah_version_text().split(".") if n.isdigit())


class BuildahBackend:
    name = "oci"

    def __init__(self) -> None:
        self.driver = "overlay" if _overlay_usable() else "vfs"

    def _cmd(self, *args: str | Path) -> list[str | Path]:
        return ["buildah", "--storage-driver", self.driver, *args]

    def tools(self) -> dict[str, str]:
        return {"buildah": buildah_version_text() or "unknown", "storage-driver": self.driver}

    def build(self, job: BuildJob, steps: Steps) -> BuildOutput:
        secrets = secret_option("ca", job.ca_bundle) if job.ca_bundle else []  # refused before anything runs
        base = base_for(job.inputs.stack, job.layers.flavour)
        if base.debootstrap_suite and not self._exists(base.ref):
            self._import_base(steps, base, job.staging / "base")
        context = write_context(job)
        tag = job.inputs.images[job.layers.flavour.slug]
        argv: list[str | Path] = self._cmd("build", "--layers", "--isolation", "chroot", *ulimit_options(), "--target", "final", "-t", tag)
        argv += platform_option(job.layers.flavour.arch)
        argv += secrets
        for key, value in build_args(job).items():
            argv += ["--build-arg", f"{key}={value}"]
        secret, secret_env = netrc_secret(job)
        steps.run("image", [*argv, *secret, "-f", context / "Dockerfile", context], env=secret_env, network=True)
        steps.timed("sbom", lambda: self._attach_sbom(job, tag))
        return self._describe(tag)

    def _attach_sbom(self, job: BuildJob, tag: str) -> None:
        """The image's SBOM at SBOM_PATH_IN_IMAGE and its sha256 in the SBOM_LABEL label: the
        distributions listed by the image's own Python, its Debian packages from its dpkg database,
        the rest from the lock and the build."""
        container = self._must(self._cmd("from", "--quiet", *ulimit_options(), tag), "open the image").strip()
        try:
            listed = self._must(
                self._cmd("run", "--isolation", "chroot", container, "--", "python", "-I", "-c", LIST_DISTRIBUTIONS),
                "list the image's distributions",
            )
            installed = json.loads(listed.strip().splitlines()[-1])
            system = image_system(lambda argv: proc.run(self._cmd("run", "--isolation", "chroot", container, "--", *argv), echo=False))
            path = job.staging / "sbom.cdx.json"
            atomic_write_text(path, make_sbom(sbom_inputs(job, "oci", installed, {}, system=system)))
            self._must(self._cmd("copy", "--quiet", container, path, SBOM_PATH_IN_IMAGE), "copy the SBOM in")
            self._must(self._cmd("config", "--label", f"{SBOM_LABEL}={sha256_file(path)}", container), "label the SBOM")
            self._must(self._cmd("commit", "--quiet", container, tag), "commit the image with its SBOM")
        finally:
            proc.run(self._cmd("rm", container), echo=False)

    @staticmethod
    def _must(argv: list[str | Path], what: str) -> str:
        return _must(proc.run(argv, echo=False), what)

    def _exists(self, ref: str) -> bool:
        return proc.run(self._cmd("inspect", "--type", "image", ref), echo=False).ok

    def _import_base(self, steps: Steps, base: Base, work: Path) -> None:
        assert base.debootstrap_suite is not None
        tar = debootstrap_rootfs(steps, base.debootstrap_suite, work)
        container = steps.run("base-container", self._cmd("from", "scratch")).stdout.strip()
        try:
            steps.run("base-add", self._cmd("add", container, tar, "/"))
            steps.run("base-commit", self._cmd("commit", "--quiet", container, base.ref))
        finally:
            proc.run(self._cmd("rm", container), echo=False)
            shutil.rmtree(work, ignore_errors=True)

    def _describe(self, tag: str) -> BuildOutput:
        result = proc.run(self._cmd("inspect", "--type", "image", tag), echo=False)
        if not result.ok:
            raise BuildError(f"image {tag} was not created: {result.stderr.strip()}")
        data = json.loads(result.stdout)
        manifest = json.loads(data["Manifest"])
        size = sum(int(layer.get("size", 0)) for layer in manifest.get("layers", []))
        return BuildOutput(
            sizes={"image": size},
            image=tag,
            image_id=data["FromImageID"],
            image_digest=data.get("FromImageDigest") or None,
            layers=list(data["OCIv1"]["rootfs"]["diff_ids"]),
        )


class DockerBackend:
    name = "oci"

    def tools(self) -> dict[str, str]:
        version = proc.run(["docker", "buildx", "version"], echo=False)
        if not version.ok:
            raise ToolMissingError("docker buildx is not available", hint="install the docker-buildx plugin")
        return {"docker-buildx": version.stdout.split()[1] if len(version.stdout.split()) > 1 else "unknown"}

    def build(self, job: BuildJob, steps: Steps) -> BuildOutput:
        secrets = secret_option("ca", job.ca_bundle) if job.ca_bundle else []  # refused before anything runs
        base = base_for(job.inputs.stack, job.layers.flavour)
        if base.debootstrap_suite and not proc.run(["docker", "image", "inspect", base.ref], echo=False).ok:
            tar = debootstrap_rootfs(steps, base.debootstrap_suite, job.staging / "base")
            steps.run("base-import", ["docker", "import", tar, base.ref])
            shutil.rmtree(tar.parent, ignore_errors=True)
        context = write_context(job)
        tag = job.inputs.images[job.layers.flavour.slug]
        argv: list[str | Path] = ["docker", "buildx", "build", "--load", "--target", "final", "-t", tag, *secrets]
        argv += platform_option(job.layers.flavour.arch)
        for key, value in build_args(job).items():
            argv += ["--build-arg", f"{key}={value}"]
        secret, secret_env = netrc_secret(job)
        steps.run("image", [*argv, *secret, "-f", context / "Dockerfile", context], env=secret_env, network=True)
        steps.timed("sbom", lambda: self._attach_sbom(job, tag))
        result = proc.run(["docker", "image", "inspect", tag], echo=False)
        data = json.loads(result.stdout)[0]
        return BuildOutput(
            sizes={"image": int(data.get("Size", 0))},
            image=tag,
            image_id=data["Id"],
            image_digest=_repo_digest(data.get("RepoDigests") or []),
            layers=list(data["RootFS"]["Layers"]),
        )

    def _attach_sbom(self, job: BuildJob, tag: str) -> None:
        """As buildah's: the image's SBOM at SBOM_PATH_IN_IMAGE and its sha256 in the SBOM_LABEL
        label, from what the image's own Python lists and its dpkg database; with the Docker
        engine's own commands (a container created from the image, the file copied in, committed
        with the label under the same tag: its entrypoint, command and variables kept)."""

        def run_in_image(argv: list[str]) -> proc.Result:
            return proc.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", argv[0], tag, *argv[1:]], echo=False)

        listed = _must(run_in_image(["python", "-I", "-c", LIST_DISTRIBUTIONS]), "list the image's distributions")
        installed = json.loads(listed.strip().splitlines()[-1])
        folder = job.staging / "sbom"
        path = folder / Path(SBOM_PATH_IN_IMAGE).name
        atomic_write_text(path, make_sbom(sbom_inputs(job, "oci", installed, {}, system=image_system(run_in_image))))
        container = _must(proc.run(["docker", "create", tag], echo=False), "create a container of the image").strip()
        try:
            # a folder copied to a path that does not exist yet becomes it (its parent, /usr/share, does)
            _must(
                proc.run(["docker", "cp", f"{folder}/.", f"{container}:{Path(SBOM_PATH_IN_IMAGE).parent}"], echo=False), "copy the SBOM in"
            )
            _must(
                proc.run(["docker", "commit", "--change", f"LABEL {SBOM_LABEL}={sha256_file(path)}", container, tag], echo=False),
                "commit the image with its SBOM",
            )
        finally:
            proc.run(["docker", "rm", "--force", container], echo=False)


def _must(result: proc.Result, what: str) -> str:
    """The command's output; BuildError naming what could not be done and its last line otherwise."""
    if not result.ok:
        last = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        raise BuildError(f"sbom: could not {what}: {last[:300]}")
    return result.stdout


def _repo_digest(repo_digests: list[str]) -> str | None:
    """The sha256 digest of the first 'name@sha256:...' docker knows for the image (after a push
    or a pull); None for an image that only exists locally."""
    for ref in repo_digests:
        _, _, digest = str(ref).partition("@")
        if digest.startswith("sha256:"):
            return digest
    return None


def _overlay_usable() -> bool:
    """Overlay needs kernel support and a store that accepts it; vfs works everywhere, only slower."""
    try:
        if "overlay" not in Path("/proc/filesystems").read_text(encoding="utf-8"):
            return False
    except OSError:
        return False
    return proc.run(["buildah", "--storage-driver", "overlay", "info"], echo=False).ok

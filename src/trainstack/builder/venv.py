"""The venv backend: a relocatable uv virtual environment from the flavour's hash-checked lock.

Assembled under a staging name and swapped into build/<flavour>/venv; relocatable so that
the rename keeps its scripts working.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from trainstack import proc
from trainstack.buildenv import missing_compiler_cache
from trainstack.builder.activation import write_activation_env
from trainstack.builder.backend import BuildJob, BuildOutput
from trainstack.builder.disk import require_free_disk, tree_size
from trainstack.builder.download import DEFAULT_INDEX, Fetcher, download_sdist, index_auth
from trainstack.builder.evidence import record_venv
from trainstack.builder.extensions import ExtensionBuilder
from trainstack.builder.git import fetch_git
from trainstack.builder.steps import Steps
from trainstack.console import err
from trainstack.errors import ToolMissingError
from trainstack.fsutil import atomic_write_text
from trainstack.indexauth import lock_index_urls, uv_index_options
from trainstack.lock.layers import SourceBuild
from trainstack.lock.lockfile import LockFile, hashes, parse_lock
from trainstack.offline import python_downloads_off
from trainstack.run.install import install_into_venv


class VenvBackend:
    name = "venv"

    def tools(self) -> dict[str, str]:
        uv = proc.run(["uv", "--version"], echo=False).stdout.split()
        return {"uv": uv[1] if len(uv) > 1 else "unknown"}

    def build(self, job: BuildJob, steps: Steps) -> BuildOutput:
        venv = job.staging / "venv"
        python = venv / "bin" / "python"
        env = _network_env(job.ca_bundle)
        provide_python(steps, job.layers.flavour.slug, job.layers.flavour.python, env)
        steps.run("venv", ["uv", "venv", "--quiet", "--relocatable", "--python", job.layers.flavour.python, venv], env=env)
        install = _install_lock(job)
        atomic_write_text(job.staging / "locks" / "install.txt", install.text())
        # the lock names its indexes; their credentials reach uv only through its environment
        index_argv, index_env = uv_index_options(*lock_index_urls(install.options), os.environ)
        steps.run(
            "install",
            ["uv", "pip", "sync", "--python", python, "--require-hashes", *index_argv, job.staging / "locks" / "install.txt"],
            env={**env, **index_env},
            network=True,
            recover=refresh_missing_pins,
            fetching="the locked packages",
        )
        extensions = ExtensionBuilder(job, steps, venv)
        if job.skip_sources:
            for src in job.layers.sources:
                steps.skipped(f"compile-{src.component.key}", "--skip-sources")
        elif job.layers.sources:
            missing = missing_compiler_cache(job.inputs.stack.build.compiler_cache)
            if missing is not None:
                err.print(f"warning: {missing}", highlight=False, markup=False)
            extensions.prepare()  # the toolchain compiles a kernel before any extension build
            for src in job.layers.sources:
                self._source(job, steps, src, python, env, extensions)
        steps.run("check", ["uv", "pip", "check", "--python", python], env=env)
        install_into_venv(venv)  # the trainstack run hook: TRAINSTACK_* variables reach jobs here; off unless set
        write_activation_env(venv, job.inputs.stack.env)  # the stack's [env], as the image's ENV sets it
        shutil.rmtree(job.staging / "src", ignore_errors=True)  # sources are not part of the build
        record_venv(job, venv, extensions.records)  # files.json and the SBOM, of the finished venv
        return BuildOutput(sizes={"venv": tree_size(venv)}, extensions=extensions.records)

    def _source(
        self, job: BuildJob, steps: Steps, src: SourceBuild, python: Path, env: dict[str, str], extensions: ExtensionBuilder
    ) -> None:
        comp = src.component
        workdir = job.staging / "src" / comp.key
        if comp.git is not None:
            fetch_git(steps, comp, workdir)
            target: Path | str = workdir
        elif comp.path is not None:  # relative to the stack file, as lock pinned it (not to the working folder)
            target = (job.inputs.stack_path.parent / comp.path.removeprefix("file://")).resolve()
        else:
            target = _fetch_sdist(job, steps, src, workdir)
        minimum = job.inputs.stack.build.min_free_disk_gb
        free = require_free_disk(job.staging, minimum, f"compile-{comp.key}")
        extensions.build(src, target, python, env, round(free, 2))  # a cached wheel, or compiled now


def python_installed(version: str, env: dict[str, str] | None = None) -> bool:
    """Whether uv finds a Python ``version`` on this machine without downloading one."""
    found = proc.run(["uv", "python", "find", version], env={**(env or {}), "UV_PYTHON_DOWNLOADS": "never"}, echo=False)
    return found.ok and bool(found.stdout.strip())


def provide_python(steps: Steps, slug: str, version: str, env: dict[str, str]) -> None:
    """The flavour's Python, found before anything else: an installed one is used; a missing
    one is refused up front where uv may not download it (offline, UV_PYTHON_DOWNLOADS=never),
    else downloaded as a network step of its own, so that a failure names what it was fetching."""
    if python_installed(version, env):
        return
    why = python_downloads_off({**os.environ, **env})
    if why is not None:
        raise ToolMissingError(
            f"flavour {slug} needs Python {version}: no Python {version} is installed here, and uv may not download one ({why})",
            hint=f"install Python {version} (the distribution's python{version} package, or 'uv python install "
            f"{version}' where the network is reachable) so that 'uv python find {version}' finds it, "
            "or let uv download it (UV_PYTHON_DOWNLOADS=automatic, without --offline)",
        )
    steps.run(
        f"python-{version}",
        ["uv", "python", "install", version],
        env={**env, "UV_HTTP_RETRIES": "0"},
        network=True,
        fetching=f"Python {version} (uv's standalone build)",
    )


# uv's words for a pin that the index page does not list (not a hash or platform mismatch)
_MISSING_PIN = re.compile(r"there is no version of ([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s,]+)")


def refresh_missing_pins(output: str, argv: list[str | Path]) -> tuple[list[str | Path], str] | None:
    """Another `uv pip sync` attempt when the index page omits a version the lock pins.

    The lock saw that version on the index, so the page uv got was stale: uv's HTTP cache,
    a proxy's or a CDN node's. The next attempt revalidates those packages' pages.
    """
    missing = _MISSING_PIN.findall(" ".join(output.split()))  # uv may wrap its message
    if not missing:
        return None
    refresh = [f"--refresh-package={name}" for name, _ in missing if f"--refresh-package={name}" not in argv]
    pins = ", ".join(f"{name}=={version}" for name, version in missing)
    why = (
        f"the index lists no {pins}, which the lock pins: a stale index page, or the version was "
        f"removed from the index (then `trainstack lock --upgrade-package {missing[0][0]}` pins another)"
    )
    return [*argv, *refresh], why


def _install_lock(job: BuildJob) -> LockFile:
    """Everything that installs from wheels (full lock minus source builds), plus the toolchain when compiling."""
    layers = job.layers
    source_keys = {s.component.key for s in layers.sources}
    main = layers.full.without(source_keys)
    if job.skip_sources or not layers.sources:
        return main
    extra = layers.toolchain.without(main.names())
    return LockFile(main.options, main.entries + extra.entries)


def _fetch_sdist(job: BuildJob, steps: Steps, src: SourceBuild, workdir: Path) -> Path:
    entry = parse_lock(src.entry_text).entries[0]
    options = job.layers.full.options
    index = next((o.split(None, 1)[1] for o in options if o.startswith("--index-url")), DEFAULT_INDEX)
    default, extras = lock_index_urls(options)
    auth = index_auth(([default] if default else []) + extras, os.environ)  # the credentials reach the index only
    fetcher = Fetcher(ca_bundle=job.ca_bundle, attempts=job.inputs.stack.build.retries, auth=auth)
    return steps.timed(
        f"fetch-{entry.name}",
        lambda: download_sdist(fetcher, index, entry.name, entry.version or "", hashes(entry), workdir),
    )


def _network_env(ca_bundle: str | None) -> dict[str, str]:
    return {"SSL_CERT_FILE": ca_bundle, "PIP_CERT": ca_bundle} if ca_bundle else {}

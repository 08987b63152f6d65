"""What a build leaves for reviewers: files.json (every installed file's hash, beside build.json)
and the CycloneDX SBOM (inside the venv, or in the image at a fixed path with a label naming its
sha256). The facts come from the build; the formats from trainstack.attest."""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainstack import proc
from trainstack.attest.dpkg import OS_RELEASE_PATH, STATUS_PATH, DebPackage, Distro, distro_of, installed_packages
from trainstack.attest.files import SBOM_NAME, FilesRecord, file_hash, snapshot
from trainstack.attest.provenance import PROVENANCE_NAME, BuildFacts, sha256_file, sign
from trainstack.attest.sbom import CudaToolkit, NativeLibrary, SbomInputs, make_sbom
from trainstack.builder.backend import BuildJob
from trainstack.builder.record import BuildRecord, ExtensionRecord
from trainstack.fsutil import atomic_write_json, atomic_write_text
from trainstack.hostnvcc import find_host_nvcc
from trainstack.lock.inputs import Inputs
from trainstack.lock.layers import FlavourLayers
from trainstack.lock.lockfile import hashes, parse_lock
from trainstack.lock.manifest import manifest_path
from trainstack.rules.nvcc import oci_route, venv_route
from trainstack.stackfile.matrix import Flavour, base_of
from trainstack.stackfile.schema import Stack
from trainstack.verify.linkcheck.check import find_elf_files
from trainstack.verify.linkcheck.elf import read_many
from trainstack.verify.linkcheck.resolve import Resolver

FILES_RECORD = "files.json"


def record_venv(job: BuildJob, venv: Path, extensions: dict[str, ExtensionRecord]) -> FilesRecord:
    """files.json beside build.json and <venv>/sbom.cdx.json, once every step succeeded."""
    files = snapshot(venv)
    atomic_write_json(job.staging / FILES_RECORD, files.model_dump(mode="json"))
    inputs = sbom_inputs(job, "venv", files.distributions, extensions, native_libraries(venv))
    atomic_write_text(venv / SBOM_NAME, make_sbom(inputs))
    return files


def image_system(run_in_image: Callable[[list[str]], proc.Result]) -> tuple[Distro | None, tuple[DebPackage, ...]]:
    """An image's operating system and installed Debian packages, read by ``run_in_image`` (a
    command run inside the image): none of either where the image has no such file (no dpkg)."""
    release, status = run_in_image(["cat", OS_RELEASE_PATH]), run_in_image(["cat", STATUS_PATH])
    distro = distro_of(release.stdout) if release.ok else None
    return distro, installed_packages(status.stdout) if status.ok else ()


def sbom_inputs(
    job: BuildJob,
    backend: str,
    installed: dict[str, str],
    extensions: dict[str, ExtensionRecord],
    native: tuple[NativeLibrary, ...] = (),
    system: tuple[Distro | None, tuple[DebPackage, ...]] = (None, ()),
) -> SbomInputs:
    layers, stack = job.layers, job.inputs.stack
    sources, wheels = {}, {}
    for src in layers.sources:
        comp = src.component
        if job.skip_sources:
            continue
        pinned = layers.locked.sources.get(comp.key)
        if pinned:
            sources[comp.key] = pinned
        elif comp.path is not None:
            sources[comp.key] = f"path {comp.path}"
        else:
            entry = parse_lock(src.entry_text).entries[0]
            sources[comp.key] = f"sdist {entry.name}=={entry.version} (sha256 one of: {', '.join(hashes(entry)) or 'none listed'})"
        if comp.key in extensions:
            wheels[comp.key] = extensions[comp.key].wheel
    return SbomInputs(
        stack=stack.stack.name,
        release=stack.stack.release,
        flavour=layers.flavour.slug,
        backend=backend,
        python=layers.flavour.python,
        lock=layers.full,
        installed=installed,
        sources=sources,
        extension_wheels=wheels,
        cuda=cuda_toolkit(job, backend),
        base_image=(layers.locked.base_image or _base(stack, layers.flavour)) if backend == "oci" else "",
        native=native,
        trainstack_version=_version(),
        distro=system[0],
        system_packages=system[1],
    )


def _base(stack: Stack, flavour: Flavour) -> str:
    """The flavour's base image ([build] base, keyed by any axis of the matrix); '' when none."""
    found = base_of(stack, flavour)
    return found[1] if found is not None else ""


def cuda_toolkit(job: BuildJob, backend: str) -> CudaToolkit | None:
    """The flavour's CUDA toolkit and how it came: PyPI's wheel, Debian's package, the devel image, the host."""
    flavour, stack = job.layers.flavour, job.inputs.stack
    if flavour.cuda == "cpu":
        return None
    rules = stack.rules_in_effect
    if backend == "venv":
        route = venv_route(rules, flavour.cuda, find_host_nvcc()) if job.layers.sources else None
    else:
        route = oci_route(rules, flavour.cuda, flavour.os, _base(stack, flavour) or None) if job.layers.sources else None
    if route is None:
        return CudaToolkit(flavour.cuda, "wheels", "the CUDA runtime libraries of the locked nvidia-* wheels; no nvcc")
    return CudaToolkit(flavour.cuda, route.kind, route.text)


def native_libraries(root: Path) -> tuple[NativeLibrary, ...]:
    """The shared libraries the environment's ELF files link to from outside it, as ld.so resolves
    them (the link check's resolver), each with its sha256."""
    resolver = Resolver.from_environment()
    inside = str(root.resolve()) + os.sep
    found: set[str] = set()
    for info in read_many(find_elf_files([root]), scan_strings=False):
        origin = os.path.dirname(info.path)
        for name in info.needed:
            hit = resolver.find(name, origin, info.rpath, info.runpath, info.elf_class)
            if hit is not None:
                real = os.path.realpath(hit[0])
                if not real.startswith(inside):
                    found.add(real)
    return tuple(NativeLibrary(path, file_hash(Path(path))) for path in sorted(found) if os.path.isfile(path))


def _version() -> str:
    try:
        return importlib.metadata.version("trainstack")
    except importlib.metadata.PackageNotFoundError:
        return ""


def write_provenance(folder: Path, inputs: Inputs, layers: FlavourLayers, record: BuildRecord, signer: Any) -> Path:
    """provenance.intoto.json beside build.json in ``folder`` (the staging folder, or an up-to-date
    build's own): the signed statement of the build its records describe."""
    if record.backend == "venv":
        files = FilesRecord.model_validate_json((folder / FILES_RECORD).read_bytes())
        subjects = {"venv": files.digest(), SBOM_NAME: sha256_file(folder / "venv" / SBOM_NAME)}
    else:
        subjects = {record.image or layers.flavour.slug: (record.image_id or "").removeprefix("sha256:")}
    byproducts = {name: sha256_file(folder / name) for name in ("build.json", FILES_RECORD) if (folder / name).is_file()}
    facts = BuildFacts(
        subjects=subjects,
        stack_name=inputs.stack_path.name,
        stack_sha256=sha256_file(inputs.stack_path),
        lock_file=layers.locked.lock_file,
        lock_sha256=layers.locked.lock_sha256,
        manifest_sha256=sha256_file(manifest_path(inputs.stack_path)),
        flavour=layers.flavour.slug,
        backend=record.backend,
        skip_sources=bool(record.skipped_sources),
        build_settings=dict(layers.locked.build_settings),
        base_image=layers.locked.base_image if record.backend == "oci" else "",
        tools={"trainstack": _version(), **record.tools},
        started=record.started_at,
        finished=record.finished_at,
        byproducts=byproducts,
    )
    target = folder / PROVENANCE_NAME
    atomic_write_text(target, sign(facts, signer))
    target.chmod(0o644)
    return target

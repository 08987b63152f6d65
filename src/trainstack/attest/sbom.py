"""A CycloneDX SBOM of one built flavour: every installed distribution (its purl, version and the
lock's hashes), every extension compiled from source (the git commit or the sdist's hash), the CUDA
toolkit and how it came, the base image, the native libraries the environment links to outside
its Python packages (path and sha256), and an image's operating system with every Debian package
its dpkg database lists as installed (attest.dpkg)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainstack.attest.dpkg import DebPackage, Distro
from trainstack.lock.lockfile import LockFile, hashes

SBOM_PATH_IN_IMAGE = "/usr/share/trainstack/sbom.cdx.json"  # where an image carries its SBOM
SBOM_LABEL = "org.trainstack.sbom.sha256"  # the image label that holds that file's sha256
PROPERTY = "trainstack:"


@dataclass(frozen=True)
class CudaToolkit:
    version: str  # '12.4'
    route: str  # wheel | debian | devel | host
    text: str  # how it came, in words


@dataclass(frozen=True)
class NativeLibrary:
    path: str
    sha256: str


@dataclass(frozen=True)
class SbomInputs:
    stack: str
    release: str
    flavour: str
    backend: str  # venv | oci
    python: str
    lock: LockFile  # the flavour's full lock
    installed: dict[str, str]  # canonical name -> version, as the environment has them
    sources: dict[str, str] = field(default_factory=dict)  # canonical name -> 'git+URL@SHA' or 'sdist sha256:HEX'
    extension_wheels: dict[str, str] = field(default_factory=dict)  # canonical name -> the wheel trainstack compiled
    cuda: CudaToolkit | None = None
    base_image: str = ""  # the image (or debootstrap suite) the flavour builds on
    native: tuple[NativeLibrary, ...] = ()
    trainstack_version: str = ""
    distro: Distro | None = None  # an image's operating system (its /etc/os-release)
    system_packages: tuple[DebPackage, ...] = ()  # an image's installed Debian packages


def make_sbom(inputs: SbomInputs) -> str:
    """The SBOM as CycloneDX JSON, written by the library's own serializer. It is not validated here:
    the validator's first run in a process builds a URI grammar for its format checks (seconds, every
    build); validate_sbom checks it (the tests run it on what venv and image builds write)."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    def props(**values: str) -> list[Property]:
        return [Property(name=f"{PROPERTY}{k.replace('_', '-')}", value=v) for k, v in values.items() if v]

    root = Component(
        name=f"{inputs.stack}/{inputs.flavour}",
        version=inputs.release,
        bom_ref=f"flavour:{inputs.flavour}",
        type=ComponentType.CONTAINER if inputs.backend == "oci" else ComponentType.APPLICATION,
        properties=props(backend=inputs.backend, flavour=inputs.flavour),
    )
    bom = Bom()
    bom.metadata.component = root
    bom.metadata.tools.components.add(
        Component(name="trainstack", version=inputs.trainstack_version or None, type=ComponentType.APPLICATION)
    )
    parts = []
    names = sorted(set(inputs.installed) | {e.name for e in inputs.lock.entries})
    for name in names:
        entry = inputs.lock.get(name)
        version = inputs.installed.get(name) or (entry.version if entry else None) or ""
        purl = PackageURL("pypi", name=name, version=version or None)
        locked = entry is not None and (entry.version is None or entry.version == version or name in inputs.sources)
        parts.append(
            Component(
                name=name,
                version=version or None,
                type=ComponentType.LIBRARY,
                purl=purl,
                bom_ref=str(purl),
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=h) for h in (hashes(entry) if entry else [])],
                properties=props(
                    locked="yes" if locked else "no: installed, not in the lock",
                    installed="yes" if name in inputs.installed else "no",
                    built_from=inputs.sources.get(name, ""),
                    compiled_wheel=inputs.extension_wheels.get(name, ""),
                ),
            )
        )
    parts.append(Component(name="python", version=inputs.python, type=ComponentType.PLATFORM, bom_ref="python"))
    if inputs.cuda is not None:
        parts.append(
            Component(
                name="cuda-toolkit",
                version=inputs.cuda.version,
                type=ComponentType.PLATFORM,
                bom_ref="cuda-toolkit",
                properties=props(cuda_route=inputs.cuda.route, cuda_source=inputs.cuda.text),
            )
        )
    if inputs.base_image:
        parts.append(
            Component(name=inputs.base_image, type=ComponentType.CONTAINER, bom_ref="base-image", properties=props(role="base image"))
        )
    parts += _system_parts(inputs, props)
    for lib in inputs.native:
        parts.append(
            Component(
                name=lib.path,
                type=ComponentType.FILE,
                bom_ref=f"file:{lib.path}",
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=lib.sha256)],
                properties=props(role="native library outside the Python packages"),
            )
        )
    for part in parts:
        bom.components.add(part)
    bom.register_dependency(root, parts)
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def _system_parts(inputs: SbomInputs, props) -> list:
    """The image's operating system and its Debian packages (purl pkg:deb/<os>/<name>@<version>
    with the arch and distro qualifiers, as purl's deb type has them)."""
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    parts = []
    distro = inputs.distro
    if distro is not None:
        parts.append(
            Component(
                name=distro.id,
                version=distro.version_id or None,
                type=ComponentType.OPERATING_SYSTEM,
                bom_ref="operating-system",
                properties=props(role="the image's operating system"),
            )
        )
    namespace = distro.id if distro is not None else "debian"
    for pkg in inputs.system_packages:
        qualifiers = {"arch": pkg.arch} | ({"distro": distro.qualifier} if distro is not None else {})
        purl = PackageURL("deb", namespace=namespace, name=pkg.name, version=pkg.version, qualifiers=qualifiers)
        parts.append(
            Component(
                name=pkg.name,
                version=pkg.version,
                type=ComponentType.LIBRARY,
                purl=purl,
                bom_ref=str(purl),
                properties=props(role="Debian package of the image (dpkg)", source_package=pkg.source),
            )
        )
    return parts


def validate_sbom(text: str) -> str | None:
    """None when ``text`` is valid CycloneDX 1.6 JSON, else the validator's first error in one line."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    return None if error is None else " ".join(str(error).split())[:300]

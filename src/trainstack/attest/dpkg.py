"""An image's Debian packages, read from its dpkg database (``/var/lib/dpkg/status``) and its
``/etc/os-release``: what the SBOM lists as the image's native libraries and tools.

Both files come out of an image built on a base that anyone may publish, so each value is held
to the grammar Debian gives it, and the sizes are bounded; a value that breaks them is named with
its line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainstack.errors import BuildError

STATUS_PATH = "/var/lib/dpkg/status"
OS_RELEASE_PATH = "/etc/os-release"
MAX_STATUS_BYTES = 64 * 1024 * 1024
MAX_PACKAGES = 50_000
# Debian policy 5.6.1 (Package), 5.6.12 (Version), and dpkg's architecture names
NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")
VERSION = re.compile(r"[0-9][A-Za-z0-9.+~:-]*")
ARCH = re.compile(r"[a-z0-9][a-z0-9-]*")
OS_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
OS_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,63}")


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    source: str = ""  # the source package, where it is named otherwise


@dataclass(frozen=True)
class Distro:
    id: str  # 'debian', 'ubuntu'
    version_id: str  # '12', '24.04'; '' on a release without one (Debian testing)

    @property
    def qualifier(self) -> str:
        """purl's distro qualifier for a deb package: 'debian-12', 'ubuntu-24.04'."""
        return f"{self.id}-{self.version_id}" if self.version_id else self.id


def installed_packages(status: str, where: str = STATUS_PATH) -> tuple[DebPackage, ...]:
    """The packages whose Status says installed, sorted by name; BuildError naming ``where`` and the
    line of a stanza that breaks Debian's grammar, or when the database is over its bounds."""
    if len(status) > MAX_STATUS_BYTES:
        raise BuildError(f"sbom: {where}: larger than {MAX_STATUS_BYTES // 2**20} MiB: not a dpkg database")
    found: list[DebPackage] = []
    for start, fields in _stanzas(status):
        if not fields.get("Status", "").endswith(" installed"):
            continue
        if len(found) >= MAX_PACKAGES:
            raise BuildError(f"sbom: {where}: more than {MAX_PACKAGES} installed packages: not a dpkg database")
        name, version, arch = fields.get("Package", ""), fields.get("Version", ""), fields.get("Architecture", "")
        source = fields.get("Source", "").split(" ", 1)[0]
        for field, value, grammar in (("Package", name, NAME), ("Version", version, VERSION), ("Architecture", arch, ARCH)):
            if not grammar.fullmatch(value):
                raise BuildError(f"sbom: {where}:{start}: {field} '{value[:80]}' is not a Debian {field.lower()}")
        if source and not NAME.fullmatch(source):
            raise BuildError(f"sbom: {where}:{start}: Source '{source[:80]}' is not a Debian package name")
        found.append(DebPackage(name, version, arch, source if source != name else ""))
    return tuple(sorted(found, key=lambda p: (p.name, p.arch)))


def _stanzas(text: str):
    """(the line a stanza starts on, its fields) for each stanza; continuation lines are left out."""
    fields: dict[str, str] = {}
    start = 1
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            if fields:
                yield start, fields
            fields, start = {}, number + 1
            continue
        if line[0] in " \t":
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key, value.strip())
    if fields:
        yield start, fields


def distro_of(os_release: str, where: str = OS_RELEASE_PATH) -> Distro | None:
    """ID and VERSION_ID of an os-release file; None without an ID. BuildError for a value that is
    not a plain word."""
    values = {}
    for line in os_release.splitlines()[:200]:
        key, sep, value = line.partition("=")
        if sep and key in ("ID", "VERSION_ID"):
            values[key] = value.strip().strip("\"'")
    if not values.get("ID"):
        return None
    for key, grammar in (("ID", OS_ID), ("VERSION_ID", OS_VERSION)):
        if key in values and not grammar.fullmatch(values[key]):
            raise BuildError(f"sbom: {where}: {key} '{values[key][:80]}' is not a plain word")
    return Distro(values["ID"], values.get("VERSION_ID", ""))

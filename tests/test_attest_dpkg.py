"""An image's dpkg database and os-release read as untrusted input: installed packages only, each
value held to Debian's grammar (a bad one named with its line), sizes bounded. (tests/test_build_oci.py
checks the SBOM of a real image against dpkg-query.)"""

from __future__ import annotations

import pytest

from trainstack.attest.dpkg import DebPackage, Distro, distro_of, installed_packages
from trainstack.errors import BuildError

STATUS = """\
Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u10
Description: GNU C Library: Shared libraries
 Contains the standard libraries.
 Version: 0-not-a-field

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: libssl3
Status: install ok installed
Architecture: amd64
Source: openssl (3.0.16-1~deb12u1)
Version: 3.0.16-1~deb12u1
"""


def test_installed_packages_with_their_source_and_nothing_removed() -> None:
    assert installed_packages(STATUS) == (
        DebPackage("libc6", "2.36-9+deb12u10", "amd64"),
        DebPackage("libssl3", "3.0.16-1~deb12u1", "amd64", source="openssl"),
    )


@pytest.mark.parametrize(("edit", "message"), [
    (("Version: 3.0.16-1~deb12u1", "Version: 3.0 $(reboot)"), r"/var/lib/dpkg/status:14: Version '3.0 \$\(reboot\)' is not a Debian version"),
    (("Package: libssl3", "Package: ../../etc"), r"status:14: Package '../../etc' is not a Debian package"),
    (("Source: openssl", "Source: <script>"), r"status:14: Source '<script>' is not a Debian package name"),
])
def test_a_value_out_of_grammar_is_named_with_its_line(edit: tuple[str, str], message: str) -> None:
    with pytest.raises(BuildError, match=message):
        installed_packages(STATUS.replace(*edit))


def test_a_database_over_its_bounds_is_refused() -> None:
    with pytest.raises(BuildError, match="larger than 64 MiB"):
        installed_packages("x" * (64 * 1024 * 1024 + 1))


def test_os_release() -> None:
    assert distro_of('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n') == Distro("debian", "12")
    assert distro_of("ID=ubuntu\nVERSION_ID=\"24.04\"\n").qualifier == "ubuntu-24.04"
    assert distro_of("NAME=nothing\n") is None
    with pytest.raises(BuildError, match="VERSION_ID '12; rm' is not a plain word"):
        distro_of("ID=debian\nVERSION_ID='12; rm'\n")

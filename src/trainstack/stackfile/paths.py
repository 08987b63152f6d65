"""The one rule for paths a stack file names, used by check and by every verb that opens them.

A path in a stack file is untrusted: it may only lead where its field allows, after '~' is
expanded and every symbolic link followed, so that what check accepts is what build and verify
open. '~' means the current user's home and is written '~' or '~/...' only ('~root' is refused);
no path outside the stack's folder holds a '..' component; nothing ever skips a check.

Where each field may lead:

- ``components.<name>.path``: inside the stack's folder, or an absolute directory that exists;
- ``build.ca_bundle``: a file inside the stack's folder, or one of the system CA bundles
  (``SYSTEM_CA_BUNDLES``, the distributions' ca-certificates files);
- ``build.compiler_cache.dir``: relative (taken under the build directory), or inside the stack's
  folder, or inside the user's cache folder ``~/.cache``;
- ``verify.known_issues``: a file inside the stack's folder;
- ``verify.advisories``: a folder inside the stack's folder.
"""

from __future__ import annotations

from pathlib import Path

from trainstack import grammar

# the distributions' CA bundles (as Go's crypto/x509 lists them): Debian and Ubuntu, Fedora and
# RHEL, openSUSE, OpenELEC, CentOS and RHEL 7+, Alpine
SYSTEM_CA_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
)
FIELDS = ("components.path", "build.ca_bundle", "build.compiler_cache.dir", "verify.known_issues", "verify.advisories")


def expand_home(value: str) -> Path:
    """``value`` with a leading '~' or '~/' made the current user's home; ValueError for '~user'."""
    if value == "~" or value.startswith("~/"):
        return Path.home() / value[2:]
    if value.startswith("~"):
        raise ValueError(f"'{grammar.shown(value)}': '~' may only start '~/' (the current user's home), not name a user")
    return Path(value)


def check_syntax(value: str) -> str:
    """The grammar of a stack path (trainstack.grammar.relative_path)."""
    return grammar.relative_path(value)


def _inside(target: Path, folder: Path) -> bool:
    return target == folder or folder in target.parents


def stack_path(value: str, folder: Path, field: str) -> Path:
    """Where ``value`` of ``field`` (one of ``FIELDS``) leads from the stack's ``folder``, links
    followed: the absolute path to open, or ValueError saying what the field accepts."""
    if field not in FIELDS:
        raise ValueError(f"{field} is not a path field")
    check_syntax(value)
    folder = folder.resolve()
    given = expand_home(value)
    if field == "build.compiler_cache.dir" and not given.is_absolute():
        return given  # under the build directory; the syntax keeps it there
    target = (folder / given).resolve()
    if _inside(target, folder):
        if field in ("build.ca_bundle", "verify.known_issues") and target.exists() and not target.is_file():
            raise ValueError(f"'{grammar.shown(value)}' is not a file")
        if field == "verify.advisories" and target.exists() and not target.is_dir():
            raise ValueError(f"'{grammar.shown(value)}' is not a folder")
        return target
    if field == "components.path" and given.is_absolute():
        if not target.exists():
            raise ValueError(f"'{grammar.shown(value)}' does not exist (an absolute path must)")
        return target
    if field == "build.ca_bundle" and value in SYSTEM_CA_BUNDLES:
        if not target.is_file():
            raise ValueError(f"'{grammar.shown(value)}' is not on this machine (a system CA bundle must exist)")
        return Path(value)
    if field == "build.compiler_cache.dir":
        cache = (Path.home() / ".cache").resolve()
        if _inside(target, cache) and target != cache:
            return target
        raise ValueError(
            f"'{grammar.shown(value)}' leads out of the stack's folder {folder} and the user's cache folder {cache}; "
            "give a relative path (under the build directory), one inside the stack's folder, or '~/.cache/NAME'"
        )
    accepted = {
        "build.ca_bundle": f"a file inside it, or a system CA bundle ({', '.join(SYSTEM_CA_BUNDLES)})",
        "verify.known_issues": "a file inside it",
        "verify.advisories": "a folder inside it",
        "components.path": "a path inside it, or an absolute path",
    }[field]
    raise ValueError(f"'{grammar.shown(value)}' leads out of the stack's folder {folder}; give {accepted}")

"""The grammar of every string a stack file hands to another program. Pure: each check returns
the value or raises ValueError saying what would be accepted.

A stack file is untrusted input: its strings become requirement lines for uv, Dockerfile
instructions, shell words, image references, git arguments and YAML. Each kind of value is held
to the grammar of the program that reads it, so none can carry a second instruction.
"""

from __future__ import annotations

import json
import posixpath
import re
import string
from collections.abc import Callable
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

# What makes text read differently from what it is: characters that show nothing (the soft
# hyphen, zero-width spaces and joiners, word joiner and invisible operators, the byte order
# mark, interlinear annotations, TAG characters), bidirectional marks, embeddings, overrides and
# isolates (U+061C, U+200E/F, U+202A-202E, U+2066-2069), and lone surrogates (no text encodes them).
_INVISIBLE = "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ufff9-\ufffb\U000e0000-\U000e007f\ud800-\udfff"
# C0 and C1 controls (newline and tab included), DEL, the Unicode line/paragraph separators and
# the invisible characters: refused in every value.
CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_INVISIBLE}]")
# The same in text of several lines (Markdown prose): newlines and tabs are its own.
TEXT_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_INVISIBLE}]")

# PEP 508 names (and extras): letters, digits, '.', '_', '-'; starting and ending alphanumeric.
PEP508_NAME = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])\Z")
# Debian policy 5.6.1: lower case letters, digits, '+', '-', '.'; at least two, starting alphanumeric.
DEBIAN_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+\Z")
# Debian policy 5.6.12 (epoch:upstream-revision), as apt-get's name=version takes it.
DEBIAN_VERSION = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*\Z")
# The OCI distribution reference grammar (github.com/distribution/reference).
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
OCI_REPOSITORY = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*\Z")
OCI_REGISTRY = re.compile(rf"^{_DOMAIN}(?:/{_PATH_COMPONENT})*\Z")
OCI_TAG = re.compile(rf"^{_TAG}\Z", re.ASCII)
OCI_REFERENCE = re.compile(rf"^(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?\Z", re.ASCII)
DEBOOTSTRAP_SUITE = re.compile(r"^[a-z][a-z0-9.-]*\Z")
DEBIAN_COMPONENT = re.compile(r"^[a-z][a-z-]*\Z")
CUDA_RELEASE = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}\Z")
ABSOLUTE_DIR = re.compile(r"^(?:/(?!\.{1,2}(?:/|\Z))[A-Za-z0-9._-]+)+\Z")  # no '.' or '..' part
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
HEX_COMMIT = re.compile(r"^[0-9a-f]{7,40}\Z")
# what a URL may hold: no whitespace, quotes, backslashes, shell or PEP 508 separators ('$;&|()`#')
_URL_CHARS = re.compile(r"^[A-Za-z0-9._~:/@+,=%-]+\Z")
_INDEX_URL_CHARS = re.compile(r"^[A-Za-z0-9._~:/?@+,=%-]+\Z")

GIT_SCHEMES = ("https", "ssh", "git+ssh", "file", "git")
INDEX_SCHEMES = ("https", "http", "file")


def shown(value: object, limit: int = 60) -> str:
    """A value as one printable line, for messages: control characters escaped, long text cut."""
    text = json.dumps(str(value), ensure_ascii=True)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def no_controls(value: str, *, lines: bool = False) -> str:
    """``value`` when it holds no control or invisible character (``lines``: text of several
    lines, where newlines and tabs are accepted); else ValueError naming the character."""
    found = (TEXT_CONTROL if lines else CONTROL).search(value)
    if found:
        accepted = "newlines and tabs but no" if lines else "no newlines, tabs or"
        raise ValueError(
            f"'{shown(value)}' holds the control character {shown(found.group(0))} "
            f"({accepted} other control, invisible or bidirectional characters are accepted)"
        )
    return value


def matching(value: str, pattern: re.Pattern[str], accepted: str) -> str:
    """``value`` when ``pattern`` matches all of it; else ValueError: it is not ``accepted``."""
    if not pattern.fullmatch(value):
        raise ValueError(f"'{shown(value)}' is not {accepted}")
    return value


def pep508_name(value: str) -> str:
    return matching(
        value,
        PEP508_NAME,
        "a package name (PEP 508: letters, digits, '.', '_', '-', starting and ending with a letter or digit, such as 'flash-attn')",
    )


def pep508_extra(value: str) -> str:
    return matching(value, PEP508_NAME, "an extra (PEP 508 name such as 'cuda12' or 'dev')")


def _parsing(value: str, parse: Callable[[str], object], invalid: type[Exception], accepted: str) -> str:
    """``value`` when it is one line that ``parse`` takes; else ValueError: it is not ``accepted``."""
    no_controls(value)
    try:
        parse(value)
    except invalid:
        raise ValueError(f"'{shown(value)}' is not {accepted}") from None
    return value


def specifier(value: str) -> str:
    return _parsing(value, SpecifierSet, InvalidSpecifier, "a version specifier (try '==2.9.1' or '>=2.8,<2.10')")


def version(value: str) -> str:
    return _parsing(value, Version, InvalidVersion, "a version (PEP 440, such as '2.9.1')")


def requirement(value: str) -> str:
    """A PEP 508 requirement by name, extras, specifier and marker; never a URL (a direct URL
    makes uv fetch and build whatever it names)."""
    no_controls(value)
    try:
        parsed = Requirement(value)
    except InvalidRequirement:
        raise ValueError(f"'{shown(value)}' is not a requirement (try 'einops' or 'torch>=2.4')") from None
    if parsed.url is not None:
        raise ValueError(
            f"'{shown(value)}' is a direct URL requirement; give a name and version (a source goes into its own component with git or path)"
        )
    if value.lstrip().startswith("-"):
        raise ValueError(f"'{shown(value)}' is not a requirement (try 'einops' or 'torch>=2.4')")
    return value


def debian_package(value: str) -> str:
    name, _, version = value.partition("=")
    if not DEBIAN_NAME.fullmatch(name) or (version and not DEBIAN_VERSION.fullmatch(version)):
        raise ValueError(
            f"'{shown(value)}' is not a Debian package (a name of lower case letters, digits, '+', '-', '.', "
            "optionally '=VERSION', such as 'libaio-dev' or 'git=1:2.39.5-0+deb12u2')"
        )
    return value


def oci_repository(value: str) -> str:
    return matching(
        value,
        OCI_REPOSITORY,
        "an image repository (OCI reference grammar: lower case path components separated by '/', such as 'ml/trainstack-torch')",
    )


def oci_registry(value: str) -> str:
    if value and not OCI_REGISTRY.fullmatch(value.rstrip("/")):
        raise ValueError(
            f"'{shown(value)}' is not a registry (OCI reference grammar: a host with an optional port and "
            "path, such as 'registry.example.com/ml' or 'localhost:5000')"
        )
    return value


def oci_tag(value: str) -> str:
    if not OCI_TAG.fullmatch(value) or len(value) > 80:
        raise ValueError(
            f"'{shown(value)}' is not usable in an image tag (OCI tag grammar: letters, digits, '_', '.', '-', "
            "not starting with '.' or '-', at most 80 characters, such as '2026.12.0')"
        )
    return value


def base_image(value: str) -> str:
    """An OCI reference, or 'debootstrap:SUITE' (a base made from the distribution's archive)."""
    if value.startswith("debootstrap:"):
        if not DEBOOTSTRAP_SUITE.fullmatch(value.removeprefix("debootstrap:")):
            raise ValueError(f"'{shown(value)}' names no debootstrap suite (such as 'debootstrap:bookworm')")
        return value
    return matching(
        value,
        OCI_REFERENCE,
        "an image reference (OCI reference grammar, such as 'docker.io/library/ubuntu:24.04', or 'debootstrap:bookworm')",
    )


def env_name(value: str) -> str:
    return matching(value, ENV_NAME, "an environment variable name (letters, digits, '_'; not a digit first)")


_TEST_WILDCARDS = frozenset("*?[]!")
MAX_TEST_PATTERN = 500


def test_pattern(value: str) -> str:
    """A pytest test id or an fnmatch pattern of ids ('tests/test_x.py::test_y[cuda]',
    '*test_linalg.py::TestEigh::*'): one line of at most MAX_TEST_PATTERN characters, no
    leading or trailing blank, and something besides wildcards (a pattern of wildcards only
    would leave no test)."""
    no_controls(value)
    if not value or len(value) > MAX_TEST_PATTERN or value != value.strip():
        raise ValueError(
            f"'{shown(value)}' is not a test id pattern (accepted: 1 to {MAX_TEST_PATTERN} characters "
            "without leading or trailing blanks, such as 'tests/test_x.py::test_y' or '*test_x.py::*')"
        )
    if all(ch in _TEST_WILDCARDS for ch in value):
        raise ValueError(
            f"'{shown(value)}' matches every test (accepted: a test id or a pattern naming some of them, such as '*test_x.py::*')"
        )
    return value


def one_line_text(value: str, limit: int = 300) -> str:
    """A non-empty line of prose of at most ``limit`` characters (a reason, a note)."""
    no_controls(value)
    if not value.strip() or len(value) > limit:
        raise ValueError(f"'{shown(value)}' is not a one-line text (accepted: 1 to {limit} characters on one line, not only blanks)")
    return value


# the value of a variable baked into an image or a venv's activation: printable ASCII, one line
ENV_VALUE = re.compile(r"^[\x20-\x7e]{0,2000}\Z")


def env_value(value: str) -> str:
    if not ENV_VALUE.fullmatch(value):
        no_controls(value)
        raise ValueError(
            f"'{shown(value)}' is not an environment value trainstack bakes in (accepted: printable "
            "ASCII on one line, at most 2000 characters: what the lock manifest records)"
        )
    return value


# an image tag template's field: a flavour axis or a component whose locked version it takes
TAG_FIELD = re.compile(r"^[a-z][a-z0-9_]{0,99}\Z")
_TAG_LITERAL = re.compile(r"^[A-Za-z0-9_.-]*\Z")
MAX_IMAGE_TAG = 128  # the OCI distribution spec's limit


def tag_template_fields(value: str) -> list[str]:
    """The field names of an image tag template ('{release}-cuda{cuda}-torch{torch}'), in order;
    ValueError when its text is not tag characters or a field is not a plain '{name}'."""
    no_controls(value)
    if not value or len(value) > 500:
        raise ValueError(
            f"'{shown(value)}' is not a tag template (accepted: 1 to 500 characters, such as "
            "'{release}-cuda{cuda}-torch{torch}-py{python}')"
        )
    fields = []
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as exc:
        raise ValueError(f"'{shown(value)}' is not a tag template ({exc}; a literal brace is not accepted)") from None
    for literal, field, spec, conversion in parts:
        if not _TAG_LITERAL.fullmatch(literal):
            raise ValueError(
                f"'{shown(literal)}' in the tag template is not tag text (accepted: letters, digits, "
                "'_', '.', '-' around '{field}' names)"
            )
        if field is None:
            continue
        if spec or conversion or not TAG_FIELD.fullmatch(field):
            raise ValueError(
                f"'{{{shown(field)}{'!' + shown(conversion) if conversion else ''}{':' + shown(spec) if spec else ''}}}' "
                "is not a tag field (accepted: '{name}' with a lower-case name, no format or conversion)"
            )
        fields.append(field)
    return fields


def image_tag(value: str) -> str:
    """A full image tag (OCI distribution grammar: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127})."""
    if len(value) > MAX_IMAGE_TAG or not OCI_TAG.fullmatch(value):
        raise ValueError(
            f"'{shown(value, 200)}' is not a valid image tag (OCI: letters, digits, '_', '.', '-', not "
            f"starting with '.' or '-', at most {MAX_IMAGE_TAG} characters; {len(value)} given)"
        )
    return value


def commit(value: str) -> str:
    return matching(value, HEX_COMMIT, "a git commit (7 to 40 lowercase hex digits)")


def git_url(value: str) -> str:
    """https, ssh, file or git URLs with a host or path; never an option ('-...'), never a password."""
    no_controls(value)
    accepted = "an https://, ssh://, git:// or file:// URL of a repository, such as 'https://github.com/NVIDIA/apex'"
    if value.startswith("-") or not _URL_CHARS.fullmatch(value):
        raise ValueError(f"'{shown(value)}' is not {accepted}")
    parts = urlsplit(value)
    if parts.scheme not in GIT_SCHEMES or "::" in value:
        raise ValueError(f"'{shown(value)}' is not {accepted}")
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError(f"'{shown(value)}' is not a file:// URL of an absolute path (file:///srv/git/apex)")
    elif not parts.hostname or parts.hostname.startswith("-") or (parts.username or "").startswith("-") or not parts.path.strip("/"):
        raise ValueError(f"'{shown(value)}' is not {accepted}")
    if parts.password is not None or (parts.username is not None and parts.scheme in ("https", "git")):
        raise ValueError(
            f"'{shown(redacted_url(value))}': credentials do not belong in a stack file; "
            "give the URL without them (git reads them from its credential helper)"
        )
    return value


def index_url(value: str) -> str:
    """http(s) or file URLs of a package index; credentials come from the environment, never the stack."""
    no_controls(value)
    if value.startswith("-") or not _INDEX_URL_CHARS.fullmatch(value):
        raise ValueError(f"'{shown(value)}' is not an index URL (such as 'https://pypi.example.com/simple')")
    parts = urlsplit(value)
    if parts.scheme not in INDEX_SCHEMES or (parts.scheme != "file" and not parts.hostname):
        raise ValueError(f"'{shown(value)}' is not an index URL (http://, https:// or file://, such as 'https://pypi.example.com/simple')")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            f"'{shown(redacted_url(value))}': credentials do not belong in a stack file; give the URL without "
            "'user:password@' and set them in the environment (UV_INDEX_<NAME>_USERNAME and _PASSWORD, "
            "see 'Private indexes' in the README)"
        )
    return value


# the characters RFC 3986 allows in a URI, '%' of percent-encoding included: nothing else
_LINK_CHARS = re.compile(r"^[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+$")
WEB_SCHEMES = ("http", "https")


def web_link(value: str) -> str:
    """An http(s) URL with a host: the only kind of link notes and pages hold (never
    javascript:, data:, file: or a value that could end the link it sits in)."""
    accepted = "an http(s) link such as 'https://github.com/org/project/issues/1'"
    if not _LINK_CHARS.match(value):
        raise ValueError(f"'{shown(value)}' is not {accepted} (it holds a character a URL may not)")
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        host = None
    if parts.scheme not in WEB_SCHEMES or not host:
        raise ValueError(f"'{shown(value)}' is not {accepted}")
    return value


def redacted_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.username is None and parts.password is None:
        return value
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"***@{host}").geturl()


def relative_path(value: str) -> str:
    """The grammar of a path in a stack file: no control characters, not empty, never an option;
    '~' only as '~' or '~/...' (the current user's home, never '~user'); a path that is absolute
    or starts at home holds no '..' at all, a relative one never climbs above its folder. Where
    each field may lead on disk is trainstack.stackfile.paths' rule."""
    no_controls(value)
    if not value or value.startswith("-"):
        raise ValueError(f"'{shown(value)}' is not a path")
    if value.startswith("~") and value != "~" and not value.startswith("~/"):
        raise ValueError(f"'{shown(value)}': '~' may only start '~/' (the current user's home), not name a user")
    if value.startswith(("/", "~")):
        if ".." in value.split("/"):
            raise ValueError(f"'{shown(value)}' holds '..'; give the path without it")
        return value
    normal = posixpath.normpath(value)
    if normal == ".." or normal.startswith("../"):
        raise ValueError(f"'{shown(value)}' climbs out of the stack's folder; give a path inside it, or an absolute path")
    return value

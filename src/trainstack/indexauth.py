"""Private package indexes: each index gets a name, and its credentials come from the environment.

An index's name is its host, lower case, every other character a '-' ('pypi.example.com' ->
'pypi-example-com'; a second index on the same host gets '-2', ...). uv reads the credentials
of a named index from UV_INDEX_<NAME>_USERNAME and UV_INDEX_<NAME>_PASSWORD (the name upper
case, every other character a '_'), so stack files, lock files and rendered files hold the URL
alone. Credentials given the older way, inside UV_INDEX_URL, UV_DEFAULT_INDEX, UV_EXTRA_INDEX_URL
or UV_INDEX, are found too and handed on the same way. Image builds get them as a netrc build
secret. Pure: the environment is an argument.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from trainstack.errors import BuildError
from trainstack.redact import strip_userinfo

# uv's index settings in the environment: trainstack passes the stack's own indexes explicitly
INDEX_VARS = ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX")


@dataclass(frozen=True)
class Index:
    name: str
    url: str  # without credentials

    @property
    def env_prefix(self) -> str:
        return "UV_INDEX_" + re.sub(r"[^A-Za-z0-9]", "_", self.name).upper()


def name_indexes(urls: Sequence[str]) -> list[Index]:
    """Names for ``urls`` (credentials stripped, duplicates dropped), in order."""
    indexes: list[Index] = []
    taken: set[str] = set()
    seen: set[str] = set()
    for raw in urls:
        url = strip_userinfo(raw)
        if url.rstrip("/") in seen:
            continue
        seen.add(url.rstrip("/"))
        base = re.sub(r"[^a-z0-9]+", "-", (urlsplit(url).hostname or "local").lower()).strip("-") or "index"
        name, number = base, 1
        while name in taken:
            number += 1
            name = f"{base}-{number}"
        taken.add(name)
        indexes.append(Index(name, url))
    return indexes


def env_index_urls(environ: Mapping[str, str]) -> list[str]:
    """URLs (possibly with credentials) that uv's index variables of the environment name."""
    urls = []
    for var in INDEX_VARS:
        for word in environ.get(var, "").split():
            # UV_INDEX entries may be NAME=URL
            urls.append(word.split("=", 1)[1] if "=" in word.split("://", 1)[0] else word)
    return urls


def default_from_env(environ: Mapping[str, str]) -> str | None:
    """The default index the environment sets for uv (UV_DEFAULT_INDEX, then UV_INDEX_URL)."""
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        value = environ.get(var, "").strip()
        if value:
            return value.split("=", 1)[1] if "=" in value.split("://", 1)[0] else value
    return None


def credentials(index: Index, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(username, password) of ``index``: its UV_INDEX_<NAME>_* variables, else credentials
    written into one of uv's index variables for the same URL."""
    user = environ.get(f"{index.env_prefix}_USERNAME")
    password = environ.get(f"{index.env_prefix}_PASSWORD")
    if user is not None or password is not None:
        return user or "", password or ""
    for raw in env_index_urls(environ):
        parts = urlsplit(raw)
        if (parts.username or parts.password) and strip_userinfo(raw).rstrip("/") == index.url.rstrip("/"):
            from urllib.parse import unquote

            return unquote(parts.username or ""), unquote(parts.password or "")
    return None


def uv_index_options(default: str | None, extras: Sequence[str], environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's command-line options for these indexes and the environment that carries their
    credentials (uv's own index variables blanked, so that only the stack's indexes count).

    ``default`` None keeps the environment's default index (a mirror), without its credentials.
    """
    default = default if default is not None else default_from_env(environ)
    urls = ([default] if default else []) + list(extras)
    named = name_indexes(urls)
    by_url = {i.url.rstrip("/"): i for i in named}
    argv: list[str] = []
    env: dict[str, str] = {var: "" for var in INDEX_VARS}
    for position, raw in enumerate(urls):
        index = by_url[strip_userinfo(raw).rstrip("/")]
        flag = "--default-index" if position == 0 and default else "--index"
        if f"{index.name}={index.url}" not in argv:
            argv += [flag, f"{index.name}={index.url}"]
        found = credentials(index, environ)
        if found is not None:
            env[f"{index.env_prefix}_USERNAME"], env[f"{index.env_prefix}_PASSWORD"] = found
    return argv, env


def lock_index_urls(options: Sequence[str]) -> tuple[str | None, list[str]]:
    """(default, extras) named by a lock file's option lines."""
    default, extras = None, []
    for option in options:
        flag, _, value = option.partition(" ")
        value = value.strip()
        if flag in ("--index-url", "-i"):
            default = value
        elif flag == "--extra-index-url":
            extras.append(value)
    return default, extras


def netrc_text(urls: Sequence[str], environ: Mapping[str, str]) -> str:
    """A netrc with the credentials of ``urls`` (for pip inside an image build, as a build secret)."""
    lines = []
    for index in name_indexes(urls):
        found = credentials(index, environ)
        host = urlsplit(index.url).hostname
        if found is None or not host:
            continue
        user, password = found
        if re.search(r"[\s\"']", user + password):
            raise BuildError(
                f"the credentials of index {index.url} hold whitespace or quotes, which a netrc cannot carry",
                hint=f"set {index.env_prefix}_USERNAME and _PASSWORD to a token without them",
            )
        lines.append(f"machine {host} login {user or 'token'} password {password}\n")
    return "".join(lines)

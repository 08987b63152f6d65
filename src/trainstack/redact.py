"""Credentials out of everything trainstack shows or writes: echoed commands, logs, errors, lock files.

Index credentials reach uv and image builds only through the environment and build secrets
(trainstack.indexauth); this is the last line, applied to any text on its way out: ``redact``
is the one masking pass, and it runs where text leaves trainstack — every write to stdout and
stderr (``MaskedStream``, around the consoles and, for the command line, the process's own
streams), every file written as one unit (``fsutil.atomic_write_text``, the release notes),
every line of a command's log (``proc``). A credential is masked as written, JSON-escaped and
HTML-escaped, so that a test id, a failure message or a log line carrying one (``test_x[<token>]``)
reaches no output and no result file. Pure but for reading the environment.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import TextIO
from urllib.parse import quote, unquote, urlsplit

from trainstack.trust import credential_name

MASK = "***"
# scheme://userinfo@ : the userinfo is dropped, whatever it holds (a token is often the user name)
# (up to the authority's last '@', as URL parsers read it: a password may hold an '@' of its own)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s'\"<>]+)@")
# environment variables whose values are credentials: uv's per-index ones and the usual names
_SECRET_VAR = re.compile(r"(^UV_INDEX_.+_(USERNAME|PASSWORD)$)|PASSWORD|PASSWD|TOKEN|SECRET|_KEY$|^NETRC$", re.I)
_INDEX_VARS = ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
MIN_SECRET = 4  # shorter values would mask ordinary words
MIN_OTHER_SECRET = 8  # for variables named like secrets that are not uv's index credentials


def credential_variable(name: str) -> bool:
    """Whether a variable's name says its value is a credential (a password, token, secret or key)."""
    return bool(_SECRET_VAR.search(name))


def strip_userinfo(url: str) -> str:
    """``url`` without 'user:password@' (what a lock file or a rendered file may hold)."""
    return _USERINFO.sub(lambda m: m.group("scheme"), url)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Credential values present in the environment, longest first."""
    environ = os.environ if environ is None else environ
    found = {
        v
        for k, v in environ.items()
        if (_SECRET_VAR.search(k) or credential_name(k))
        and len(v) >= (MIN_SECRET if k.upper().startswith("UV_INDEX_") else MIN_OTHER_SECRET)
    }
    for name in _INDEX_VARS:
        for word in environ.get(name, "").split():
            parts = urlsplit(word.split("=", 1)[-1] if "=" in word.split("://", 1)[0] else word)
            for value in (parts.username, parts.password):
                if value and len(value) >= MIN_SECRET:
                    found.update({value, unquote(value)})
    # as written, and as a URL or a tool's message carries it ('p@ss' as 'p%40ss')
    found |= {quote(value, safe="") for value in found} | {quote(value) for value in found}
    return sorted(found, key=len, reverse=True)


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with URL user info and every credential value of the environment masked, in
    each form it may take on its way out (as written, JSON-escaped, HTML-escaped)."""
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    for value in secret_values(environ):
        for form in _forms(value):
            text = text.replace(form, MASK)
    return text


def _forms(value: str) -> list[str]:
    """``value`` as written and as JSON and HTML write it, longest first."""
    forms = {
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        html.escape(value),
        html.escape(value, quote=False),
    }
    return sorted(forms, key=len, reverse=True)


def redact_data(data: object, environ: Mapping[str, str] | None = None) -> object:
    """``data`` (parsed JSON: dicts, lists, strings, numbers) with every string redacted, keys too:
    what a result file read back holds, masked before any renderer escapes it its own way."""
    if isinstance(data, str):
        return redact(data, environ)
    if isinstance(data, list):
        return [redact_data(item, environ) for item in data]
    if isinstance(data, dict):
        return {redact(str(key), environ) if isinstance(key, str) else key: redact_data(value, environ) for key, value in data.items()}
    return data


class MaskedStream:
    """A text stream whose every write goes through ``redact`` (a write is one print: a
    credential is never split between two)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @property
    def masked(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def masked(stream: TextIO) -> TextIO:
    """``stream`` behind the masking pass (once: a masked stream is returned as it is)."""
    return stream if isinstance(stream, MaskedStream) else MaskedStream(stream)  # type: ignore[return-value]  # MaskedStream writes and flushes as a TextIO does, without subclassing it

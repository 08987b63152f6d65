"""Credentials out of everything trainstack shows or writes: echoed commands, logs, errors, lock files.

Index credentials reach uv and image builds only through the environment and build secrets
(trainstack.indexauth); this is the last line, applied to any text on its way out. Pure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
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
    """``text`` with URL user info and every credential value of the environment masked."""
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    for value in secret_values(environ):
        text = text.replace(value, MASK)
    return text

"""Source downloads over HTTP(S): a locked sdist found through the index's JSON simple API, hash-checked.

Every request is a network step: retried with backoff plus a random delay on connection
errors and 5xx/429 answers, then one NetworkError. A private index's credentials come from the
environment (trainstack.indexauth: UV_INDEX_<NAME>_USERNAME/_PASSWORD) and go, as HTTP basic
auth, to that index's host only, never to another host a page links or redirects to; URLs in
errors are shown without user info.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from trainstack.errors import BuildError
from trainstack.fsutil import atomic_write_bytes
from trainstack.indexauth import credentials, name_indexes
from trainstack.redact import redact, strip_userinfo
from trainstack.retry import TransientFailure, with_retries

DEFAULT_INDEX = "https://pypi.org/simple"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
SAFE_FILENAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # an sdist's file name: no path, no dot file


@dataclass(frozen=True)
class HostAuth:
    """Basic credentials for one index host (host:port), and the variables they came from."""

    user: str
    password: str = field(repr=False)
    env_prefix: str = ""

    @property
    def header(self) -> str:
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()


def index_auth(urls: Sequence[str], environ: Mapping[str, str]) -> dict[str, HostAuth]:
    """host:port -> credentials, for each of ``urls`` whose credentials the environment holds
    (the first index of a host wins)."""
    found: dict[str, HostAuth] = {}
    for index in name_indexes(urls):
        pair = credentials(index, environ)
        host = urllib.parse.urlsplit(index.url).netloc
        if pair is not None and host and host not in found:
            found[host] = HostAuth(pair[0], pair[1], index.env_prefix)
    return found


def _host(url: str) -> str:
    return urllib.parse.urlsplit(strip_userinfo(url)).netloc


class _BasicAuth(urllib.request.BaseHandler):
    """Adds the Authorization header to each request (redirects included) whose host has
    credentials; as an unredirected header, urllib never copies it to a redirect's target."""

    handler_order = 100  # before the HTTP handlers open the connection

    def __init__(self, auth: Mapping[str, HostAuth]) -> None:
        self.auth = auth

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        found = self.auth.get(_host(request.full_url))
        if found is not None:
            request.add_unredirected_header("Authorization", found.header)
        return request

    https_request = http_request


@dataclass(frozen=True)
class Fetcher:
    """HTTP GETs with retries; ``ca_bundle`` replaces the default trust store (TLS-intercepting proxies);
    ``auth`` holds the credentials of the index hosts (``index_auth``)."""

    ca_bundle: str | None = None
    attempts: int = 4
    initial_wait: float = 1.0
    timeout: float = 60.0
    auth: Mapping[str, HostAuth] = field(default_factory=dict)

    def get(self, url: str, *, accept: str | None = None) -> bytes:
        return with_retries(lambda: self._once(url, accept), what=f"GET {redact(url)}", attempts=self.attempts, initial=self.initial_wait)

    def _opener(self) -> urllib.request.OpenerDirector:
        context = ssl.create_default_context(cafile=self.ca_bundle)
        return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _BasicAuth(self.auth))

    def _once(self, url: str, accept: str | None) -> bytes:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise BuildError(f"GET {redact(url)}: only http and https URLs are fetched")
        request = urllib.request.Request(strip_userinfo(url), headers={"Accept": accept} if accept else {})
        try:
            with self._opener().open(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 or exc.code == 429:
                raise TransientFailure(f"HTTP {exc.code}") from None
            raise BuildError(f"GET {redact(url)}: HTTP {exc.code} {redact(str(exc.reason))}", hint=self._hint(url, exc.code)) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise TransientFailure(redact(str(getattr(exc, "reason", exc)))) from None

    def _hint(self, url: str, code: int) -> str | None:
        if code not in (401, 403):
            return None
        known = self.auth.get(_host(url))
        if known is not None:
            return f"the index refused the credentials of {known.env_prefix}_USERNAME and {known.env_prefix}_PASSWORD"
        prefix = name_indexes([strip_userinfo(url)])[0].env_prefix
        return f"the index asks for credentials: set {prefix}_USERNAME and {prefix}_PASSWORD in the environment"


def sdist_url(fetcher: Fetcher, index: str, name: str, version: str, sha256s: list[str]) -> tuple[str, str]:
    """(URL, sha256) of the sdist of ``name==version`` whose hash the lock lists."""
    page = urllib.parse.urljoin(index.rstrip("/") + "/", canonicalize_name(name) + "/")
    try:
        files = json.loads(fetcher.get(page, accept=SIMPLE_JSON))["files"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise BuildError(f"{redact(page)}: not a JSON simple-API project page") from None
    for item in files if isinstance(files, list) else []:
        hashes = item.get("hashes") if isinstance(item, dict) else None
        digest = hashes.get("sha256") if isinstance(hashes, dict) else None
        filename = item.get("filename") if isinstance(item, dict) else None
        if (
            isinstance(filename, str)
            and isinstance(item.get("url"), str)
            and digest in sha256s
            and filename.endswith((".tar.gz", ".zip"))
            and f"-{version}." in filename
        ):
            return urllib.parse.urljoin(page, item["url"]), digest
    raise BuildError(
        f"{redact(page)}: no sdist of {name}=={version} with a hash from the lock",
        hint="re-lock the stack: the index no longer serves the locked file",
    )


def download_sdist(fetcher: Fetcher, index: str, name: str, version: str, sha256s: list[str], dest: Path) -> Path:
    """Download the locked sdist into ``dest``; BuildError when its sha256 does not match the lock."""
    url, digest = sdist_url(fetcher, index, name, version, sha256s)
    data = fetcher.get(url)
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise BuildError(f"{redact(url)}: sha256 {actual} does not match the lock's {digest}")
    filename = Path(urllib.parse.urlsplit(url).path).name
    if not SAFE_FILENAME.fullmatch(filename):
        raise BuildError(f"{redact(url)}: not a file name to write ('{filename}')")
    path = dest / filename
    atomic_write_bytes(path, data)
    return path

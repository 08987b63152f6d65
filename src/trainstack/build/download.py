"""Source downloads over HTTP(S): a locked sdist found through the index's JSON simple API, hash-checked.

Every request is a network step: retried with backoff plus a random delay on connection
errors and 5xx/429 answers, then one NetworkError.
"""

from __future__ import annotations

import hashlib
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from trainstack.errors import BuildError
from trainstack.fsutil import atomic_write_bytes
from trainstack.retry import TransientFailure, with_retries

DEFAULT_INDEX = "https://pypi.org/simple"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class Fetcher:
    """HTTP GETs with retries; ``ca_bundle`` replaces the default trust store (TLS-intercepting proxies)."""

    ca_bundle: str | None = None
    attempts: int = 4
    initial_wait: float = 1.0
    timeout: float = 60.0

    def get(self, url: str, *, accept: str | None = None) -> bytes:
        return with_retries(
            lambda: self._once(url, accept), what=f"GET {url}", attempts=self.attempts, initial=self.initial_wait
        )

    def _once(self, url: str, accept: str | None) -> bytes:
        request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        context = ssl.create_default_context(cafile=self.ca_bundle) if url.startswith("https:") else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 or exc.code == 429:
                raise TransientFailure(f"HTTP {exc.code}") from None
            raise BuildError(f"GET {url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise TransientFailure(str(getattr(exc, "reason", exc))) from None


def sdist_url(fetcher: Fetcher, index: str, name: str, version: str, sha256s: list[str]) -> tuple[str, str]:
    """(URL, sha256) of the sdist of ``name==version`` whose hash the lock lists."""
    page = urllib.parse.urljoin(index.rstrip("/") + "/", canonicalize_name(name) + "/")
    try:
        files = json.loads(fetcher.get(page, accept=SIMPLE_JSON))["files"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise BuildError(f"{page}: not a JSON simple-API project page") from None
    for item in files:
        digest = item.get("hashes", {}).get("sha256")
        filename = item.get("filename", "")
        if digest in sha256s and filename.endswith((".tar.gz", ".zip")) and f"-{version}." in filename:
            return urllib.parse.urljoin(page, item["url"]), digest
    raise BuildError(
        f"{page}: no sdist of {name}=={version} with a hash from the lock",
        hint="re-lock the stack: the index no longer serves the locked file",
    )


def download_sdist(fetcher: Fetcher, index: str, name: str, version: str, sha256s: list[str], dest: Path) -> Path:
    """Download the locked sdist into ``dest``; BuildError when its sha256 does not match the lock."""
    url, digest = sdist_url(fetcher, index, name, version, sha256s)
    data = fetcher.get(url)
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise BuildError(f"{url}: sha256 {actual} does not match the lock's {digest}")
    path = dest / Path(urllib.parse.urlparse(url).path).name
    atomic_write_bytes(path, data)
    return path

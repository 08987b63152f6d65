"""A private index's credentials on loopback: basic auth with a user and a password made for the
session, the variables uv reads them from, and a search for the password anywhere it must not be."""

from __future__ import annotations

import base64
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from trainstack.indexauth import name_indexes

USER = "trainstack-ci"
PASSWORD = f"pw-{uuid.uuid4().hex}"


def authorized(handler: BaseHTTPRequestHandler) -> bool:
    """Basic auth with USER:PASSWORD, counted on the handler's class; a 401 otherwise."""
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    if handler.headers.get("Authorization") != expected:
        type(handler).refused += 1
        handler.send_response(401)
        handler.send_header("WWW-Authenticate", 'Basic realm="private"')
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return False
    type(handler).authorized += 1
    return True


def credentials_env(url: str) -> dict[str, str]:
    prefix = name_indexes([url])[0].env_prefix  # UV_INDEX_127_0_0_1
    return {f"{prefix}_USERNAME": USER, f"{prefix}_PASSWORD": PASSWORD}


def leaks(root: Path, *texts: str) -> list[str]:
    """Every file under ``root`` and every text that holds the password (plain or in basic auth form)."""
    secrets = [PASSWORD.encode(), base64.b64encode(f"{USER}:{PASSWORD}".encode())]
    found = [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and any(s in p.read_bytes() for s in secrets)]
    return found + [f"output {n}" for n, t in enumerate(texts) if any(s.decode() in t for s in secrets)]

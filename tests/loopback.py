"""A real HTTP server on loopback, in a thread, for the tests that inject network faults."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler], path: str = "/simple") -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields the URL of ``path`` on it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}"
    finally:
        server.shutdown()
        server.server_close()


class WheelIndex(BaseHTTPRequestHandler):
    """A PEP 503 simple index of one project on loopback: ``/simple/<project>/`` links each of
    ``wheels`` (file name -> bytes) with its sha256, served under ``/files/``. Subclasses set
    ``project`` and ``wheels``; one that checks credentials overrides ``admit``."""

    project = ""
    wheels: dict[str, bytes] = {}

    def admit(self) -> bool:
        """Whether to answer this request (a refusal has been replied already)."""
        return True

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's name); uv asks for ranges, then GETs
        self._reply(405, b"", "text/plain")

    def do_GET(self) -> None:  # noqa: N802
        if not self.admit():
            return
        name = self.path[len("/files/") :] if self.path.startswith("/files/") else None
        if self.path.rstrip("/") == f"/simple/{self.project}":
            links = "".join(f'<a href="/files/{n}#sha256={hashlib.sha256(d).hexdigest()}">{n}</a>\n' for n, d in self.wheels.items())
            self._reply(200, f"<html><body>\n{links}</body></html>\n".encode(), "text/html")
        elif name in self.wheels:
            self._reply(200, self.wheels[name], "application/octet-stream")
        else:
            self._reply(404, b"", "text/plain")

    def _reply(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass

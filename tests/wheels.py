"""Real wheels for the loopback indexes of the tests: zip files with METADATA, WHEEL and a RECORD
of sha256 hashes, as uv installs them with --require-hashes."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile


def wheel(project: str, version: str, files: dict[str, str], summary: str = "") -> tuple[str, bytes]:
    """A py3-none-any wheel of ``project`` ``version`` holding ``files`` (path -> text); returns
    (file name, bytes)."""
    dist = project.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n" + (f"Summary: {summary}\n" if summary else "")
    files = {
        **files,
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: trainstack-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return f"{dist}-{version}-py3-none-any.whl", buffer.getvalue()


def demo_wheel(version: str) -> tuple[str, bytes]:
    """A minimal real wheel of demo-pkg: one module that knows its version."""
    return wheel("demo-pkg", version, {"demo_pkg.py": f"VERSION = {version!r}\n"})

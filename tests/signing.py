"""A signing key written as a build's --signing-key reads it: PEM, PKCS#8, unencrypted, mode 0600."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization


def write_key(path: Path, key) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return path

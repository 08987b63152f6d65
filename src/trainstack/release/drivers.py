"""Minimum driver per CUDA version, from the compatibility rules (the edge the notes call)."""

from __future__ import annotations

from trainstack.release.notes import MinDriver


def rules_lookup(cuda: str) -> MinDriver | None:
    """The rules' minimum driver for CUDA ``cuda``, with its source link; None when not in the rules."""
    from trainstack.rules import min_driver  # type: ignore[import-not-found]

    rule = min_driver(cuda)
    return None if rule is None else MinDriver(version=rule.version, source=rule.source)

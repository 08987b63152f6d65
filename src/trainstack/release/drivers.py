"""Minimum driver per CUDA version, from the compatibility rules (the edge the notes call)."""

from __future__ import annotations

from trainstack.release.notes import DriverLookup, MinDriver


def rules_lookup() -> DriverLookup:
    """CUDA version -> the rules' minimum driver with its source link."""
    from trainstack.rules import min_driver  # type: ignore[import-not-found]

    def lookup(cuda: str) -> MinDriver | None:
        rule = min_driver(cuda)
        return None if rule is None else MinDriver(version=rule.version, source=rule.source)

    return lookup

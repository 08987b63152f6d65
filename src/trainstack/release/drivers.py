"""Minimum driver per CUDA version, from the compatibility rules (the edge the notes call)."""

from __future__ import annotations

from trainstack.errors import RuleViolation
from trainstack.release.notes import MinDriver


def rules_lookup(cuda: str) -> MinDriver | None:
    """The rules' minimum driver for CUDA ``cuda``, with its source link; None when not in the rules."""
    from trainstack.rules import load_rules, min_driver

    try:
        version = min_driver(cuda)
    except RuleViolation:
        return None
    return MinDriver(version=version, source=load_rules().cuda.driver.source)

"""Minimum driver per CUDA version, from the compatibility rules (the edge the notes call)."""

from __future__ import annotations

from trainstack.errors import RuleViolation
from trainstack.release.notes import MinDriver
from trainstack.rules import Rules, min_driver


def rules_lookup(rules: Rules, cuda: str) -> MinDriver | None:
    """``rules``' minimum driver for CUDA ``cuda``, with its source link; None when not in the rules."""
    try:
        version = min_driver(rules, cuda)
    except RuleViolation:
        return None
    return MinDriver(version=version, source=rules.cuda.driver.source)

"""Shared fixtures: example stacks copied into a temporary directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "stacks"


@pytest.fixture
def example_stack(tmp_path: Path):
    """Copy examples/stacks/<name>.toml into tmp_path and return the copy's path."""

    def copy(name: str) -> Path:
        target = tmp_path / f"{name}.toml"
        shutil.copyfile(EXAMPLES / f"{name}.toml", target)
        return target

    return copy


@pytest.fixture
def write_stack(tmp_path: Path):
    """Write stack text to tmp_path/<name>.toml and return its path."""

    def write(text: str, name: str = "stack") -> Path:
        path = tmp_path / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        return path

    return write

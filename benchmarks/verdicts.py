"""What the GPU scripts' verdict programs share: one line per target ending in "met" or
"MISSED" (``verdict``; ``missed()`` says whether any was), and the rows of a JSON-lines file."""

import json
from pathlib import Path

_missed: list[str] = []


def verdict(text: str, hit: bool) -> None:
    print(f"{text}: {'met' if hit else 'MISSED'}")
    if not hit:
        _missed.append(text)


def missed() -> bool:
    return bool(_missed)


def rows_of(path: Path) -> list[dict]:
    """The rows of a bench results file (JSON lines); none where it is absent."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def fp8_part(mode: str) -> str:
    """A mode's float8 part (fp8, fp8-rowwise, fp8-fastacc); "" in a mode without one."""
    return next((p for p in mode.split("+") if p.startswith("fp8")), "")

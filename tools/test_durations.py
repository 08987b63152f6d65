#!/usr/bin/env python3
"""Each test file's seconds from a pytest JUnit XML report, written to tests/durations.json.

tests/conftest.py hands pytest-xdist the files longest first (and `--no-loadscope-reorder`
keeps that order), so that the longest start at once and the workers end together; a file not
in durations.json goes among the short ones unless it holds a test marked slow. Refresh after a
whole run: `python3 -m pytest ... --junitxml=report.xml`, then
`python3 tools/test_durations.py report.xml`. Only the order of the files depends on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET  # noqa: S405 (pytest's own report of this checkout's run)
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "durations.json"


def file_seconds(report: Path) -> dict[str, float]:
    """tests/<file>.py -> the sum of its test cases' times (set-up and teardown included)."""
    seconds: Counter[str] = Counter()
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314 (as above)
        module = case.get("classname", "")
        if module.startswith("tests."):
            seconds["tests/" + module.split(".")[1] + ".py"] += float(case.get("time") or 0)
    return {name: round(value, 1) for name, value in sorted(seconds.items())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a JUnit XML report of a whole run (pytest --junitxml)")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (default: tests/durations.json)")
    args = parser.parse_args()
    try:
        seconds = file_seconds(args.report)
    except (OSError, ET.ParseError) as exc:
        print(f"error: {args.report}: {exc}", file=sys.stderr)
        return 2
    if not seconds:
        print(f"error: {args.report}: no test case of tests/ in it", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(seconds, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(seconds)} files, {sum(seconds.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

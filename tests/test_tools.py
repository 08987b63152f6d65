"""tools/test_durations.py: each test file's seconds summed from a real JUnit XML report of pytest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_durations_sum_each_files_cases_from_pytests_own_report(tmp_path: Path) -> None:
    suite = tmp_path / "tests"
    suite.mkdir()
    (suite / "__init__.py").write_text("")
    (suite / "test_slow.py").write_text("import time\n\ndef test_a():\n    time.sleep(0.3)\n\ndef test_b():\n    time.sleep(0.2)\n")
    (suite / "test_quick.py").write_text("def test_c():\n    pass\n")
    report = tmp_path / "report.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", f"--junitxml={report}", "tests"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]
    out = tmp_path / "durations.json"
    made = subprocess.run([sys.executable, ROOT / "tools" / "test_durations.py", report, "--out", out], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    seconds = json.loads(out.read_text())
    assert set(seconds) == {"tests/test_slow.py", "tests/test_quick.py"}
    assert seconds["tests/test_slow.py"] >= 0.5 > seconds["tests/test_quick.py"]
    broken = subprocess.run([sys.executable, ROOT / "tools" / "test_durations.py", tmp_path / "missing.xml", "--out", out],
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1 and "missing.xml" in broken.stderr

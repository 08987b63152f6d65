"""The corpus of bounds (tests/corpus/bounds_*): inputs past a size, a depth, a disk or a type,
each driven through the real verbs (`verify`, `check`, `bench --compare`) as a process and
asserting one error: line or a bounded run, no traceback, a bound on time and memory. Each
case's `.attacks` note says what it attacks and what must hold."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.corpus_harness import CORPUS, Case, case, gone, holds, measured, verb  # noqa: F401 (case: a fixture)


# --- class 5: bounds and tracebacks ----------------------------------------------------------


def test_a_known_issues_file_nested_50000_deep_is_one_error_line(case: Case) -> None:
    stack = case.stack("suites_shm_procsys.py", known="bounds_known_deep.toml")
    ran = case.verify(stack, timeout=30)
    holds(ran, seconds=60, peak_mib=300)
    lines = ran.stderr.strip().splitlines()
    assert ran.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), ran.stderr[-2000:]
    assert "bounds_known_deep.toml" in lines[0] and "nested" in lines[0]


def test_markup_in_a_known_issue_is_printed_as_written(case: Case) -> None:
    stack = case.stack("bounds_known_markup.py", known="bounds_known_markup.toml")
    ran = case.verify(stack)
    holds(ran, seconds=60)
    assert ran.code == 0, ran.text[-2000:]
    assert "https://example.org/issue/[/]x" in ran.stdout and "[bold red]styled?[/] reason" in ran.stdout


def test_a_full_tmpdir_during_a_suite_is_one_error_line(case: Case, tmp_path: Path) -> None:
    from tests.mounts import tmpfs

    with tmpfs(tmp_path / "small", "size=4m") as small:
        case.env["TMPDIR"] = str(small)
        ran = case.verify(case.stack("bounds_tmpdir_full.py"))
        left = gone(case.mark)
    holds(ran, seconds=60)
    lines = ran.stderr.strip().splitlines()
    assert ran.code == 8, ran.text[-2000:]
    assert lines[-1].startswith("error: ") and "No space left on device" in lines[-1], lines[-3:]
    assert sum(line.startswith("error: ") for line in lines) == 1
    assert left == []


@pytest.mark.parametrize("field", ["batch", "seq", "steps", "warmup", "preset", "modes"])
def test_a_bench_field_of_another_type_is_refused(field: str) -> None:
    ran = verb("check", str(CORPUS / f"bounds_bench_{field}.toml"))
    holds(ran, seconds=20)
    lines = ran.stderr.strip().splitlines()
    assert ran.code == 2 and lines and lines[0].startswith("error: "), ran.text
    assert f"bench.{field}" in lines[0] and f"bounds_bench_{field}.toml" in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(CORPUS.glob("bounds_types_*.toml")), ids=lambda p: p.stem)
def test_a_field_of_another_type_anywhere_in_a_stack_is_refused(case: Path) -> None:
    """One rule for every table (the schema's strict types), not [bench]'s alone."""
    field = dict(line.split(": ", 1) for line in case.with_name(case.name + ".attacks").read_text().splitlines())["field"]
    ran = verb("check", str(case))
    holds(ran, seconds=20)
    lines = ran.stderr.strip().splitlines()
    assert ran.code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {case}:"), ran.text
    assert f" {field}: Input should be a valid " in lines[0], lines[0]


def test_bench_compare_of_200000_rows_is_bounded(tmp_path: Path) -> None:
    """Bounded against the floor of the same machine at the same time: reading the two files
    (json.loads of every line) in a bare interpreter."""
    spec = json.loads((CORPUS / "bounds_compare_rows.json").read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from compare_rows import FLOOR, results_file
    finally:
        sys.path.pop(0)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    results_file(a, spec["rows"], 1000.0)
    results_file(b, spec["rows"], 1100.0)
    floor = measured([sys.executable, "-c", FLOOR, str(a), str(b)], timeout=600)
    ran = verb("bench", "--compare", str(a), str(b), timeout=600)
    assert ran.code == 0, ran.stderr[-2000:]
    holds(ran, seconds=max(spec["seconds_at_most"], spec["floor_times_at_most"] * floor.seconds),
          peak_mib=max(spec["peak_mib_at_most"], spec["floor_times_at_most"] * floor.peak_mib))
    assert len(ran.stdout.splitlines()) < 1000  # the tables show the first pairs and count the rest


def test_a_build_record_nested_100000_deep_or_a_fifo_is_unreadable_not_a_traceback(tmp_path: Path) -> None:
    """verify reads the build folder's build.json (what it was built with, what it left out): a
    planted one nested past json's recursion, or a FIFO, is 'unreadable', not a RecursionError or a
    read that waits."""
    import os

    from trainstack.fsutil import loads_strict
    from trainstack.verify.report import build_facts
    from trainstack.verify.scope import skipped_sources

    deep = tmp_path / "build.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        loads_strict(deep.read_text())
    assert skipped_sources(deep) == []
    assert "unreadable (arrays or objects nested too deeply)" in build_facts(deep, None).record
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert skipped_sources(fifo) == []

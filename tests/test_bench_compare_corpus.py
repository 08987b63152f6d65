"""bench --compare over hostile result files (tests/data/corpus/bench-compare, what each attacks in a
``<file>.attacks`` beside it; ``*.fifo`` planted as a FIFO): a refused file ends in one line naming
it and why, exit 2; a shown one prints its names as plain text, not as console markup."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_no_traceback
from trainstack.cli import main

CORPUS = Path(__file__).resolve().parent / "data" / "corpus" / "bench-compare"
CASES = sorted(p for p in CORPUS.iterdir() if p.suffix != ".attacks")
GOOD = {"model": "tiny", "mode": "eager", "status": "ok", "batch": 2, "seq": 64, "world_size": 1,
        "tokens_per_s_per_gpu": 900.0, "mfu": 0.1, "mem_allocated_gib": 1.5}
pytestmark = pytest.mark.timeout(60)


def header(case: Path) -> str:
    return case.read_text() if case.suffix == ".fifo" else Path(f"{case}.attacks").read_text(encoding="utf-8")


def field(case: Path, name: str) -> str | None:
    found = re.search(rf"^# {name}: (.+)$", header(case), re.M)
    return found.group(1) if found else None


def test_each_case_says_what_it_attacks() -> None:
    assert len(CASES) >= 12
    for case in CASES:
        assert header(case).startswith("# attacks: ") and field(case, "expect") in ("refused", "shown"), case.name
        assert field(case, "expect") == "shown" or field(case, "because"), case.name


def plant(case: Path, tmp_path: Path) -> tuple[Path, Path]:
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(GOOD) + "\n")
    planted = tmp_path / case.name.removesuffix(".fifo")
    if case.suffix == ".fifo":
        os.mkfifo(planted)
    else:
        planted.write_bytes(case.read_bytes())
    return planted, good


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_compare_over_each_case(case: Path, tmp_path: Path, capsys) -> None:
    planted, good = plant(case, tmp_path)
    code = main(["bench", "--compare", str(planted), str(good)])
    out, err = capsys.readouterr()
    assert_no_traceback(out + err)
    if field(case, "expect") == "refused":
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert str(planted) in err and field(case, "because") in err, err
    else:
        assert code == 0, err
        row = json.loads(planted.read_text().splitlines()[0])
        for name in (row["model"], row["mode"]):
            assert name in " ".join(out.split()), out  # printed as written, not taken as markup


def test_a_markup_name_through_a_real_process(tmp_path: Path) -> None:
    planted, good = plant(CORPUS / "model-rich-markup.jsonl", tmp_path)
    code = "import sys; from trainstack.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "bench", "--compare", str(planted), str(good)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0 and "[/] [bold red]INJECTED" in done.stdout, done.stderr

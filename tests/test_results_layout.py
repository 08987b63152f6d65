"""benchmarks/results/ holds one folder per benchmark with its README, its index lists exactly
those folders, and every results path the README and docs/ name exists."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "README.md"
# a results path as the prose writes it (`a.{txt,json}` one path): up to the closing backtick,
# a space, a bracket or a sentence's last punctuation
NAMED = re.compile(r"benchmarks/results/(?:\{[^{}\s]*\}|[^\s`'\"()<>,;{])*")
ROW = re.compile(r"^\| `([^`]+)/` \|", re.MULTILINE)
BRACES = re.compile(r"\{([^{}]*)\}")


def folders() -> set[str]:
    return {entry.name for entry in RESULTS.iterdir() if entry.name != "README.md"}


def test_every_entry_is_a_folder_with_a_readme() -> None:
    assert folders(), "benchmarks/results/ holds no folder"
    stray = sorted(name for name in folders() if not (RESULTS / name).is_dir() or (RESULTS / name).is_symlink())
    assert stray == [], f"not a folder: {stray}"
    bare = sorted(name for name in folders() if not (RESULTS / name / "README.md").is_file())
    assert bare == [], f"no README.md: {bare}"


def test_the_index_lists_every_folder_and_nothing_else() -> None:
    rows = ROW.findall(INDEX.read_text(encoding="utf-8"))
    assert len(rows) == len(set(rows)), f"listed twice: {sorted(r for r in rows if rows.count(r) > 1)}"
    assert set(rows) == folders(), (f"not in the index: {sorted(folders() - set(rows))}; "
                                    f"in the index, not a folder: {sorted(set(rows) - folders())}")


def expand(path: str) -> list[str]:
    """`a.{txt,json}` -> `a.txt`, `a.json` (every brace group; a path holds a few at most)."""
    parts = BRACES.split(path)
    choices = [[part] if i % 2 == 0 else part.split(",") for i, part in enumerate(parts)]
    return ["".join(combination) for combination in itertools.product(*choices)]


def named_paths() -> list[tuple[str, str]]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for doc in docs:
        for match in NAMED.finditer(doc.read_text(encoding="utf-8")):
            found.append((str(doc.relative_to(ROOT)), match.group(0).rstrip(".:")))
    return found


def test_every_results_path_the_readme_and_docs_name_exists() -> None:
    named = named_paths()
    assert len(named) > 20, "the README and docs/ name no results: the pattern is wrong"
    missing = []
    for doc, path in named:
        for candidate in expand(path):
            relative = candidate.removeprefix("benchmarks/results/")
            exists = any(RESULTS.glob(relative)) if "*" in relative else (RESULTS / relative).exists()
            if not exists:
                missing.append(f"{doc}: {candidate}")
    assert missing == []


def test_brace_groups_expand_to_each_file() -> None:
    assert expand("benchmarks/results/x/a.{txt,json}") == ["benchmarks/results/x/a.txt", "benchmarks/results/x/a.json"]
    assert expand("benchmarks/results/x/") == ["benchmarks/results/x/"]


def test_a_script_writes_its_result_into_its_own_folder(tmp_path, monkeypatch) -> None:
    """benchmarks/resultfile.py: NAME.txt and NAME.json land in results/FOLDER/ (FOLDER: NAME by default)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import resultfile

    monkeypatch.setattr(resultfile, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(resultfile, "ROOT", tmp_path)
    resultfile.Run("cli_speed").write("a table", {"ratio": 1.0})
    resultfile.Run("linkcheck_gpu", folder="linkcheck_speed").write("a table", {})
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["results/cli_speed/cli_speed.json", "results/cli_speed/cli_speed.txt",
                       "results/linkcheck_speed/linkcheck_gpu.json", "results/linkcheck_speed/linkcheck_gpu.txt"]
    assert "a table" in (tmp_path / "results" / "cli_speed" / "cli_speed.txt").read_text()

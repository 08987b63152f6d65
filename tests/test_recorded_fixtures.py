"""No test reads benchmarks/results/: running a benchmark again rewrites its folder there, and
the suite must not change with it. A test copies what it needs under tests/data/recorded (or
makes its figures itself); test_results_layout, which checks that folder's own layout, is
the one exception."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
EXCEPTIONS = {"test_results_layout.py", Path(__file__).name}  # the folder's own test, and this one's examples


def _docstrings(tree: ast.Module) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return {id(n.body[0].value) for n in nodes if n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def _path_parts(node: ast.AST) -> list[str]:
    """The string constants of a ``a / "b" / "c"`` chain, left to right."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _path_parts(node.left) + _path_parts(node.right)
    return [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []


def readers_of_benchmark_results(source: str) -> list[int]:
    """Lines of ``source`` that name benchmarks/results in code (docstrings and comments aside)."""
    tree = ast.parse(source)
    skipped = _docstrings(tree)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            if "benchmarks/results" in node.value:
                lines.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = _path_parts(node)
            if "benchmarks" in parts and "results" in parts[parts.index("benchmarks") + 1 :]:
                lines.append(node.lineno)
    return sorted(set(lines))


def test_the_check_finds_each_way_of_naming_the_folder() -> None:
    assert readers_of_benchmark_results('"""benchmarks/results/x is where it ran"""\n# benchmarks/results\n') == []
    assert readers_of_benchmark_results('R = ROOT / "benchmarks" / "results"\n') == [1]
    assert readers_of_benchmark_results('x = 1\nR = Path("benchmarks/results/run") / "a.json"\n') == [2]
    assert readers_of_benchmark_results('R = ROOT / "benchmarks" / "bench_h200.sh"\nD = ROOT / "tests" / "data" / "results"\n') == []


def test_no_test_reads_benchmarks_results() -> None:
    found = {path.name: lines for path in sorted(TESTS.glob("*.py")) if path.name not in EXCEPTIONS
             if (lines := readers_of_benchmark_results(path.read_text(encoding="utf-8")))}
    assert found == {}, f"tests reading benchmarks/results/ (copy the file under tests/data/recorded): {found}"

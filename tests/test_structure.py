"""The import graph in docs/structure.md is the source's own, and memplan's modules keep to
their public faces."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "import_graph.py"
DOC = ROOT / "docs" / "structure.md"
MEMPLAN = ROOT / "src" / "trainstack" / "memplan"


def import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plant(root: Path, modules: dict[str, str]) -> None:
    """A package ``pkg`` under ``root`` holding these modules (name -> source)."""
    package = root / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in modules.items():
        (package / f"{name}.py").write_text(source)


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", str(path)], capture_output=True, text=True, timeout=60)


def test_the_committed_import_graph_is_the_sources() -> None:
    done = check(DOC)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_a_stale_graph_is_refused_in_one_line_naming_the_line(tmp_path) -> None:
    stale = tmp_path / "structure.md"
    stale.write_text(DOC.read_text(encoding="utf-8").replace("| `memory` | `costs`, `placement` |", "| `memory` | `costs` |"), encoding="utf-8")
    done = check(stale)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {stale}: the import graph of trainstack.memplan is stale at its line ")
    assert "run python3 tools/import_graph.py --write" in done.stderr


def test_write_puts_the_graph_between_the_markers(tmp_path) -> None:
    target = tmp_path / "structure.md"
    empty = "\n".join(f"<!-- import graph of {p}: begin -->\n<!-- import graph of {p}: end -->" for p in ("trainstack", "trainstack.memplan"))
    target.write_text(f"# intro\n\n{empty}\n\ntail\n", encoding="utf-8")
    assert check(target).returncode == 1
    subprocess.run([sys.executable, str(SCRIPT), "--write", str(target)], check=True, timeout=60)
    assert check(target).returncode == 0
    text = target.read_text(encoding="utf-8")
    assert text.startswith("# intro\n") and text.endswith("\n\ntail\n") and "| `decoder` | `api`, `block_call`," in text


def test_no_module_imports_another_ones_private_name() -> None:
    private = []
    for path in sorted((ROOT / "src" / "trainstack").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainstack"):
                private += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []


def test_no_memplan_module_imports_another_ones_private_name_or_is_imported_back() -> None:
    imports: dict[str, set[str]] = {}
    private = []
    for path in sorted(MEMPLAN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trainstack.memplan."):
                imports.setdefault(path.stem, set()).add(node.module.rsplit(".", 1)[1])
                private += [f"{path.stem}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert private == []
    assert [(a, b) for a in imports for b in imports[a] if a in imports.get(b, set())] == []
    assert imports["calibration"] >= {"tracking"} and "decoder" not in imports["api"]


def test_no_module_of_trainstack_imports_itself_back_through_others() -> None:
    graph = import_graph()
    edges = graph.module_graph("trainstack")
    assert len(edges) > 150 and "trainstack.bench.mfu" in edges["trainstack.bench.runner"]
    assert graph.circles(edges) == []


def test_a_circle_through_a_type_only_and_a_function_level_import_is_found(tmp_path) -> None:
    """The two kinds of circle the source had (bench.mfu and bench.ceilings, builder.extensions and
    builder.resume): an import under TYPE_CHECKING one way, at the top or in a function the other."""
    plant(tmp_path, {
        "a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "b": "def f():\n    from pkg.a import A\n    return A\n",
        "c": "from pkg import b\n",
    })
    graph = import_graph()
    edges = graph.module_graph("pkg", tmp_path)
    assert edges["pkg.c"] == {"pkg.b"}
    assert graph.circles(edges) == [["pkg.a", "pkg.b"]]


def test_an_import_inside_a_function_is_there_to_keep_a_heavy_library_out() -> None:
    """With no circle to dodge, an import sits in a function only where it keeps torch (or another
    slow library) out of the module's start: the CLI answers --help without importing torch."""
    assert import_graph().needless_deferred("trainstack") == []


def test_a_needless_deferred_import_is_named_and_a_heavy_one_is_not(tmp_path) -> None:
    plant(tmp_path, {
        "heavy": "import numpy\n",
        "light": "X = 1\n",
        "user": "def f():\n    from pkg import heavy\n    from pkg.light import X\n    return heavy, X\n",
        "numeric": "import numpy\n\ndef g():\n    from pkg.heavy import numpy as n\n    return n\n",
    })
    assert import_graph().needless_deferred("pkg", tmp_path) == ["pkg.numeric:4 imports pkg.heavy", "pkg.user:3 imports pkg.light"]


def test_the_layers_docs_structure_names_hold_every_unit_once_and_none_imports_upwards() -> None:
    section = DOC.read_text(encoding="utf-8").split("## What lives where", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[2] for line in section.splitlines() if line.startswith("| ") and not line.startswith("| layer")]
    layers = [re.findall(r"`([a-z_]+)`", row) for row in rows]
    level = {unit: i for i, units in enumerate(layers) for unit in units}
    edges = import_graph().graph("trainstack")
    assert sorted(level) == sorted(edges) and sum(map(len, layers)) == len(level)
    assert [(a, b) for a in edges for b in edges[a] if level[b] > level[a]] == []


def test_no_test_module_imports_another() -> None:
    """What tests share lives in helper modules beside them (tests/*.py not named test_*), never in a
    test module that another imports: a test file is read, moved and deleted alone."""
    tests = ROOT / "tests"
    found = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name}:{node.lineno} imports {name}" for name in names if re.match(r"tests\.test_", name)]
    assert found == []

#!/usr/bin/env python3
"""The import graph of trainstack's packages, from the source itself (no import is run).

A unit is a package of src/trainstack (bench, memplan, ...) or a module at its top
(cli, proc, fsutil, ...; not __init__ and __main__). Every ``import`` and ``from ... import``
of ``trainstack.X`` counts, those inside functions and under TYPE_CHECKING too, and a module
named whole in a string (the verbs cli imports by name): each is a dependency a reader must
follow. Printed as Markdown: one row per package, what it imports,
and the pairs of packages that import each other; under trainstack's table, the import circles
among all its modules (each import names the most specific module: ``from trainstack.a.b import
c`` is an edge to ``a.b``, or to ``a.b.c`` where that is a module), which must be none.

``needless_deferred()`` names each import of a trainstack module made inside a function that would
bring no heavy library (``HEAVY``) the importing module does not already bring at its top: such an
import belongs at the top. Excepted: run's boot module (copied alone into environments), and the
modules every command line imports (``cli``, ``console``, each verb's ``command`` module), which
defer a verb's work until its arguments are checked.

``--check FILE``: exit 1, naming the first differing line, unless FILE holds the text
between each pair of its markers as this script prints it now (tests/test_structure.py runs it on
docs/structure.md, so the committed graph cannot go stale). ``--write FILE``: put it there.

Usage: python3 tools/import_graph.py [--check FILE | --write FILE]
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src"
# the graphs drawn: a dotted package name, each unit of it a subpackage or module
GRAPHS = ("trainstack", "trainstack.memplan")
DUNDER = ("__init__", "__main__")
# third-party libraries slow to import: an import is deferred into a function only to keep these
# out of a module's start (rich and typer are there already: the CLI itself imports them)
HEAVY = frozenset({"torch", "transformers", "torchao", "torchvision", "triton", "numpy", "selenium", "pynvml",
                   "jinja2", "elftools", "junitparser", "tenacity", "pydantic"})
ALONE = ("trainstack.run.boot",)  # imports nothing of trainstack at its top by design
# imported by every command line: each defers what only some verbs need (the verb's own work
# until its arguments are checked), so --help and a refused argument answer fast
START = re.compile(r"trainstack\.(cli|console|([a-z_]+\.)+([a-z_]+_)?command)")
MODULE_NAME = re.compile(r"trainstack(\.[a-z_][a-z0-9_]*)+")


def markers(package: str) -> tuple[str, str]:
    return f"<!-- import graph of {package}: begin -->", f"<!-- import graph of {package}: end -->"


def imported(tree: ast.AST, here: str) -> list[str]:
    """The dotted names a module imports (``here``: its own package, for relative imports)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.append(base)
            # ``from trainstack import memplan`` imports the package memplan
            names.extend(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value):
            names.append(node.value)
    return names


def graph(package: str) -> dict[str, set[str]]:
    """Unit -> the units of ``package`` it imports (itself left out)."""
    folder = SOURCE.joinpath(*package.split("."))
    packages = {p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    modules = {p.stem for p in folder.glob("*.py") if p.stem not in DUNDER}
    units = packages | modules
    edges: dict[str, set[str]] = {name: set() for name in sorted(packages) + sorted(modules)}
    depth = len(package.split("."))
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(folder).parts
        unit = parts[0] if len(parts) > 1 else path.stem
        if unit in DUNDER:
            continue
        here = ".".join([package, *parts[:-1]])
        for name in imported(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), here):
            dotted = name.split(".")
            if dotted[:depth] == package.split(".") and len(dotted) > depth and dotted[depth] in units and dotted[depth] != unit:
                edges[unit].add(dotted[depth])
    return edges


class Module(NamedTuple):
    tree: ast.Module
    here: str  # its own package, for relative imports


def modules(package: str = "trainstack", source: Path = SOURCE) -> dict[str, Module]:
    """Every module of ``package`` by its dotted name (a package by its own name), parsed."""
    folder = source.joinpath(*package.split("."))
    found: dict[str, Module] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
        if parts[-1] == "__main__":
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
        found[name] = Module(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), here)
    return found


def module_graph(package: str = "trainstack", source: Path = SOURCE) -> dict[str, set[str]]:
    """Every module of ``package`` -> the modules it imports."""
    parsed = modules(package, source)
    edges: dict[str, set[str]] = {}
    for name, module in parsed.items():
        named = {n for n in imported(module.tree, module.here) if n in parsed}
        # ``from a.b import c`` names both a.b and a.b.c: the edge goes to the most specific
        edges[name] = {n for n in named if n != name and not any(m.startswith(n + ".") for m in named)}
    return edges


def _at_start(tree: ast.Module, here: str) -> list[str]:
    """The names a module imports as it is imported: its body's imports, functions and
    TYPE_CHECKING blocks left out."""
    found: list[str] = []

    def walk(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                walk(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.extend(imported(node, here))
            for field in ("body", "orelse", "finalbody", "handlers"):
                walk(getattr(node, field, []))

    walk(tree.body)
    return found


def needless_deferred(package: str = "trainstack", source: Path = SOURCE) -> list[str]:
    """'module:line imports target' for each import inside a function that brings no heavy
    library the module lacks at its start."""
    parsed = modules(package, source)
    trees = {name: module.tree for name, module in parsed.items()}
    here = {name: module.here for name, module in parsed.items()}
    start: dict[str, tuple[set[str], set[str]]] = {}  # module -> (its modules at start, heavy libraries at start)
    for name, tree in trees.items():
        names = _at_start(tree, here[name])
        direct = {n for n in names if n in parsed and n != name}
        direct |= {".".join(m.split(".")[:i]) for m in direct for i in range(2, len(m.split(".")))}  # parents run first
        start[name] = (direct & parsed.keys(), {n.split(".")[0] for n in names} & HEAVY)

    def heavy(name: str) -> set[str]:
        seen, todo, found = {name}, [name], set()
        while todo:
            modules, libraries = start[todo.pop()]
            found |= libraries
            todo += [m for m in modules if m not in seen]
            seen |= modules
        return found

    needless = []
    for name, tree in trees.items():
        if name in ALONE or START.fullmatch(name):
            continue
        own = heavy(name)
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    targets = [n for n in imported(node, here[name]) if n in parsed]
                    if targets and not set().union(*(heavy(t) for t in targets)) - own:
                        needless.append(f"{name}:{node.lineno} imports {', '.join(sorted(set(targets)))}")
    return sorted(set(needless))


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges)))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def circles_line(package: str) -> str:
    edges = module_graph(package)
    found = circles(edges)
    if not found:
        return f"No import circle among its {len(edges)} modules.\n"
    return "Import circles: " + "; ".join(" and ".join(f"`{m}`" for m in group) for group in found) + ".\n"


def markdown(edges: dict[str, set[str]]) -> str:
    lines = ["| unit | imports |", "|---|---|"]
    for name, targets in edges.items():
        shown = ", ".join(f"`{t}`" for t in sorted(targets)) or "none of these"
        lines.append(f"| `{name}` | {shown} |")
    pairs = sorted((a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, set()))
    lines.append("")
    if pairs:
        lines.append("Units that import each other: " + ", ".join(f"`{a}` and `{b}`" for a, b in pairs) + ".")
    else:
        lines.append("No two units import each other.")
    return "\n".join(lines) + "\n"


def between(text: str, package: str) -> str | None:
    begin, end = markers(package)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", type=Path, metavar="FILE")
    group.add_argument("--write", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    drawn = {package: markdown(graph(package)) for package in GRAPHS}
    drawn["trainstack"] += "\n" + circles_line("trainstack")
    if args.check is None and args.write is None:
        print("\n".join(f"{package}:\n\n{text}" for package, text in drawn.items()), end="")
        return 0
    target = args.check or args.write
    try:
        current = target.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"error: {target}: cannot be read ({exc.strerror}); accepted: a Markdown file holding the markers of {Path(__file__).name}", file=sys.stderr)
        return 2
    updated = current
    for package, text in drawn.items():
        committed = between(current, package)
        if committed is None:
            begin, end = markers(package)
            print(f"error: {target}: no import graph markers of {package}; accepted: a file holding the lines {begin!r} and {end!r}, once each, in that order", file=sys.stderr)
            return 2
        if args.check is not None and committed != text:
            old_lines, new_lines = committed.splitlines(), text.splitlines()
            i = next((i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b), min(len(old_lines), len(new_lines)))
            old = old_lines[i] if i < len(old_lines) else "(nothing)"
            new = new_lines[i] if i < len(new_lines) else "(nothing)"
            print(f"error: {target}: the import graph of {package} is stale at its line {i + 1}: {old!r}, the source gives {new!r}; "
                  f"run python3 tools/import_graph.py --write {target}", file=sys.stderr)
            return 1
        begin, end = markers(package)
        updated = updated.split(begin, 1)[0] + f"{begin}\n{text}{end}" + updated.split(end, 1)[1]
    if args.write is not None and updated != current:
        sys.path.insert(0, str(SOURCE))
        from trainstack.fsutil import atomic_write_text

        atomic_write_text(target, updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())

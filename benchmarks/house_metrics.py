#!/usr/bin/env python
"""How the package is built, in numbers: the figures docs/design.md's architecture section and
the house issue quote, measured the same way before and after a refactor.

- import cycles among tf_autopar's modules and among its packages, counting every import
  (module level and inside functions; not under ``if TYPE_CHECKING``): an import moved into a
  function still makes the cycle, it only hides it from the interpreter;
- imports inside function bodies per 1,000 lines;
- the largest module and the largest function, in lines; the longest line;
- how many modules name a baseline, define the modes, or name a thread variable (a string
  literal in the code: each is a place a change must reach);
- the pairs the ``duplicates`` command finds in tf_autopar/ (when the command is on PATH).

    python benchmarks/house_metrics.py                 # this checkout
    python benchmarks/house_metrics.py --root DIR --out benchmarks/results/house.json
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

BASELINE_NAMES = ("tf-recommended", "intel-recommended")
MODES = ("latency", "throughput")
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "KMP_BLOCKTIME",
    "KMP_AFFINITY",
)


@dataclass
class Metrics:
    lines: int = 0
    modules: int = 0
    file_cycles: list[list[str]] = field(default_factory=list)
    package_cycles: list[list[str]] = field(default_factory=list)
    imports_in_functions: int = 0
    imports_in_functions_per_kloc: float = 0.0
    largest_module: tuple[str, int] = ("", 0)
    largest_function: tuple[str, int] = ("", 0)
    longest_line: tuple[str, int] = ("", 0)
    modules_naming_a_baseline: list[str] = field(default_factory=list)
    modules_defining_the_modes: list[str] = field(default_factory=list)
    modules_naming_a_thread_variable: list[str] = field(default_factory=list)
    duplicate_pairs: int | None = None


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """(node, inside_a_function) for every import, skipping TYPE_CHECKING blocks."""

    def walk(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    yield from walk_one(sub, in_function)
                continue
            yield from walk_one(child, in_function)

    def walk_one(child: ast.AST, in_function: bool):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, ast.If) and _is_type_checking(child):
            for sub in child.orelse:
                yield from walk_one(sub, inner)
            return
        yield from walk(child, inner)

    yield from walk(tree, False)


def _targets(node: ast.Import | ast.ImportFrom, here: str, is_package: bool, known: set[str]) -> set[str]:
    """The tf_autopar modules an import statement depends on."""
    names: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            names.add(alias.name)
    else:
        base = node.module or ""
        if node.level:
            parts = here.split(".")
            if not is_package:
                parts = parts[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([base] if base else []))
        for alias in node.names:
            # ``from p import m`` of a submodule loads p.m (p's __init__ runs first for any
            # submodule, which is no cycle); of a name defined in p, p itself.
            sub = f"{base}.{alias.name}"
            names.add(sub if sub in known else base)
    out = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            out.add(name)
    return out


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def package_of(module: str) -> str:
    """tf_autopar.graph.analysis -> tf_autopar.graph; the root's own modules stay themselves."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _strings(tree: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _defines_modes(tree: ast.AST) -> bool:
    for n in ast.walk(tree):
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            values = {e.value for e in n.elts if isinstance(e, ast.Constant)}
            if set(MODES) <= values:
                return True
    return False


def measure(root: Path) -> Metrics:
    package_dir = root / "tf_autopar"
    files = sorted(package_dir.rglob("*.py"))
    m = Metrics()
    trees = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        trees[path] = ast.parse(text, filename=str(path))
        lines = text.splitlines()
        m.lines += len(lines)
        rel = str(path.relative_to(root))
        if len(lines) > m.largest_module[1]:
            m.largest_module = (rel, len(lines))
        for number, line in enumerate(lines, 1):
            if len(line) > m.longest_line[1]:
                m.longest_line = (f"{rel}:{number}", len(line))
    m.modules = len(files)
    known = {module_name(p, root) for p in files}
    graph: dict[str, set[str]] = {name: set() for name in known}
    for path, tree in trees.items():
        here = module_name(path, root)
        rel = str(path.relative_to(root))
        for node, in_function in _imports(tree):
            if in_function:
                m.imports_in_functions += 1
            graph[here] |= _targets(node, here, path.name == "__init__.py", known) - {here}
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = n.end_lineno - n.lineno + 1
                if size > m.largest_function[1]:
                    m.largest_function = (f"{rel}:{n.name}", size)
        strings = _strings(tree)
        if strings & set(BASELINE_NAMES):
            m.modules_naming_a_baseline.append(rel)
        if _defines_modes(tree):
            m.modules_defining_the_modes.append(rel)
        if strings & set(THREAD_VARIABLES):
            m.modules_naming_a_thread_variable.append(rel)
    m.imports_in_functions_per_kloc = round(1000 * m.imports_in_functions / max(m.lines, 1), 1)
    m.file_cycles = _sccs(graph)
    packages: dict[str, set[str]] = {}
    for source, targets in graph.items():
        entry = packages.setdefault(package_of(source), set())
        for target in targets:
            # Importing a.b.c runs a/__init__ and a/b/__init__ first: count those edges too.
            parts = target.split(".")
            for depth in range(2, len(parts) + 1):
                pkg = package_of(".".join(parts[:depth]))
                if pkg != package_of(source):
                    entry.add(pkg)
    m.package_cycles = _sccs(packages)
    m.duplicate_pairs = duplicate_pairs(package_dir)
    return m


def duplicate_pairs(folder: Path) -> int | None:
    if shutil.which("duplicates") is None:
        return None
    out = subprocess.run(
        ["duplicates", "--repo", str(folder), "--most", "1", "--seconds", "120"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    if out.startswith("no duplicates"):
        return 0
    found = re.search(r"(\d+) pairs?", out)
    return int(found.group(1)) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if not (args.root / "tf_autopar").is_dir():
        print(f"error: {args.root} has no tf_autopar/ package", file=sys.stderr)
        return 2
    m = measure(args.root)
    print(f"{m.modules} modules, {m.lines} lines")
    print(f"import cycles: {len(m.file_cycles)} among modules, {len(m.package_cycles)} among packages")
    for cycle in m.file_cycles + m.package_cycles:
        print("  " + " <-> ".join(cycle))
    print(f"imports inside functions: {m.imports_in_functions} ({m.imports_in_functions_per_kloc} per 1,000 lines)")
    print(f"largest module: {m.largest_module[0]} ({m.largest_module[1]} lines)")
    print(f"largest function: {m.largest_function[0]} ({m.largest_function[1]} lines)")
    print(f"longest line: {m.longest_line[0]} ({m.longest_line[1]} characters)")
    print(
        f"modules naming a baseline: {len(m.modules_naming_a_baseline)}; defining the modes: "
        f"{len(m.modules_defining_the_modes)}; naming a thread variable: {len(m.modules_naming_a_thread_variable)}"
    )
    print(f"duplicates pairs in tf_autopar/: {m.duplicate_pairs if m.duplicate_pairs is not None else 'n/a'}")
    if args.out:
        args.out.write_text(json.dumps(asdict(m), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""How the package is built, in numbers: the figures docs/design.md's architecture section and
the house issue quote, measured the same way before and after a refactor.

- import cycles among tf_autopar's modules and among its packages, counting every import
  (module level and inside functions; not under ``if TYPE_CHECKING``): an import moved into a
  function still makes the cycle, it only hides it from the interpreter;
- the cycles that ``if TYPE_CHECKING`` imports and ``sys.modules`` look-ups of our own modules
  would close (hidden from the interpreter, not from a reader), named;
- upward arrows inside ``runtime/``: imports (of any kind above) between runtime modules that lie
  on a cycle of runtime modules, so that no order of the modules has every arrow point down;
- imports inside function bodies per 1,000 lines, TensorFlow's own deferred imports (tensorflow,
  keras) counted apart: deferring those keeps ``enable()`` from starting TensorFlow;
- the largest module, class and function, in lines; the longest line;
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
    hidden_cycles: list[list[str]] = field(default_factory=list)
    runtime_upward_arrows: list[tuple[str, str]] = field(default_factory=list)
    imports_in_functions: int = 0
    imports_in_functions_per_kloc: float = 0.0
    tensorflow_imports_in_functions: int = 0
    largest_module: tuple[str, int] = ("", 0)
    largest_class: tuple[str, int] = ("", 0)
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


def _imports(tree: ast.AST, type_checking: bool = False):
    """(node, inside_a_function) for every import; TYPE_CHECKING blocks only when asked."""

    def walk(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.body if type_checking else child.orelse:
                    yield from walk_one(sub, in_function)
                continue
            yield from walk_one(child, in_function)

    def walk_one(child: ast.AST, in_function: bool):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, ast.If) and _is_type_checking(child):
            for sub in child.body if type_checking else child.orelse:
                yield from walk_one(sub, inner)
            return
        yield from walk(child, inner)

    yield from walk(tree, False)


def _type_checking_only(tree: ast.AST):
    """The imports under ``if TYPE_CHECKING`` (they never run, but a reader follows them)."""
    plain = {id(node) for node, _ in _imports(tree)}
    return [node for node, _ in _imports(tree, type_checking=True) if id(node) not in plain]


TENSORFLOW = ("tensorflow", "keras", "tf_keras")


def _imports_tensorflow(node: ast.Import | ast.ImportFrom) -> bool:
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    return any(name.split(".")[0] in TENSORFLOW for name in names) and not getattr(node, "level", 0)


def _sys_modules_lookups(tree: ast.AST, known: set[str]) -> set[str]:
    """Our modules reached by ``sys.modules[...]`` / ``sys.modules.get(...)`` with a literal name:
    an import in all but name."""
    out = set()
    for n in ast.walk(tree):
        key = None
        if isinstance(n, ast.Subscript) and _is_sys_modules(n.value):
            key = n.slice
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get"
            and _is_sys_modules(n.func.value)
            and n.args
        ):
            key = n.args[0]
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in known:
            out.add(key.value)
    return out


def _is_sys_modules(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and getattr(node.value, "id", None) == "sys"


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
    hidden: dict[str, set[str]] = {name: set() for name in known}  # plus TYPE_CHECKING and sys.modules
    for path, tree in trees.items():
        here = module_name(path, root)
        rel = str(path.relative_to(root))
        is_package = path.name == "__init__.py"
        for node, in_function in _imports(tree):
            if in_function and _imports_tensorflow(node):
                m.tensorflow_imports_in_functions += 1
            elif in_function:
                m.imports_in_functions += 1
            graph[here] |= _targets(node, here, is_package, known) - {here}
        hidden[here] |= graph[here]
        for node in _type_checking_only(tree):
            hidden[here] |= _targets(node, here, is_package, known) - {here}
        hidden[here] |= _sys_modules_lookups(tree, known) - {here}
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                size = n.end_lineno - n.lineno + 1
                which = "largest_class" if isinstance(n, ast.ClassDef) else "largest_function"
                if size > getattr(m, which)[1]:
                    setattr(m, which, (f"{rel}:{n.name}", size))
        strings = _strings(tree)
        if strings & set(BASELINE_NAMES):
            m.modules_naming_a_baseline.append(rel)
        if _defines_modes(tree):
            m.modules_defining_the_modes.append(rel)
        if strings & set(THREAD_VARIABLES):
            m.modules_naming_a_thread_variable.append(rel)
    m.imports_in_functions_per_kloc = round(1000 * m.imports_in_functions / max(m.lines, 1), 1)
    m.file_cycles = _sccs(graph)
    m.hidden_cycles = [c for c in _sccs(hidden) if c not in m.file_cycles]
    m.runtime_upward_arrows = upward_arrows(graph, hidden, "tf_autopar.runtime")
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


def upward_arrows(real: dict[str, set[str]], hidden: dict[str, set[str]], package: str) -> list[tuple[str, str]]:
    """A package's arrows that point up: the imports that run have an order (no cycles), and an
    arrow that only a reader follows (TYPE_CHECKING, sys.modules) from a to b, where b already
    reaches a through imports that run, points against it. A cycle of real imports counts too."""
    inside = package + "."
    arrows = [(a, b) for cycle in _sccs(real) for a in cycle for b in real[a] if b in cycle and a.startswith(inside)]
    for a, targets in hidden.items():
        if not a.startswith(inside):
            continue
        for b in sorted(targets - real[a]):
            if b.startswith(inside) and _reaches(real, b, a):
                arrows.append((a, b))
    return sorted(set(arrows))


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in graph.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


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
    print(f"cycles closed only by TYPE_CHECKING imports or sys.modules look-ups: {len(m.hidden_cycles)}")
    for cycle in m.hidden_cycles:
        print("  " + " <-> ".join(cycle))
    print(f"upward arrows inside runtime/: {len(m.runtime_upward_arrows)}")
    for a, b in m.runtime_upward_arrows:
        print(f"  {a} -> {b}")
    print(
        f"imports inside functions: {m.imports_in_functions} ({m.imports_in_functions_per_kloc} per 1,000 lines), "
        f"and {m.tensorflow_imports_in_functions} of TensorFlow's (deferred, counted apart)"
    )
    print(f"largest module: {m.largest_module[0]} ({m.largest_module[1]} lines)")
    print(f"largest class: {m.largest_class[0]} ({m.largest_class[1]} lines)")
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

"""No import circle inside `scheduler/`: modules form a layered graph, so any one of them can be read,
tested and imported alone.

Every import statement counts, wherever it is: at module level, under `if TYPE_CHECKING:`, and inside a
function. A deferred or type-only import hides a circle from the interpreter, not from the reader; the
three circles this test was written against were all of that kind. `from package import name` counts
as an import of `package.name` when that is a module, else of `package`. A package's `__init__` is a
module like any other.
"""
from __future__ import annotations

import ast
from pathlib import Path

import scheduler

ROOT = Path(scheduler.__file__).parent
PACKAGE = "scheduler"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(name: str, is_package: bool, source: str, modules: set[str]) -> set[str]:
    """The `modules` that module `name` imports, anywhere in its `source`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` where only a.b is ours
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in ROOT.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(name, path.name == "__init__.py", path.read_text(), modules)
            for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 100, "the package's modules were not found"
    found = cycles(graph)
    described = ["; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found]
    assert found == [], "import circles:\n" + "\n".join(described)


def test_a_circle_is_found_wherever_its_imports_are() -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p import b\n"
              "def f():\n    import p.c.deep\n    from .d import name\n")
    assert imports_of("p.a", False, source, {"p", "p.b", "p.c", "p.d"}) == {"p.b", "p.c", "p.d"}

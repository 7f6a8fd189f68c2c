"""The bench's modules import each other without a circle.

Read from the source (``ast``), not by importing: every ``import`` counts,
including those inside functions, which run later but still tie two modules
together (a circle through a deferred import is how the bench once had
``__main__`` and a suite each reaching for the other).
"""

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "tools" / "bench"
PACKAGE = "tools.bench"


def _in_package(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def bench_imports(path: Path) -> set[str]:
    """The bench modules ``path`` imports (``tools.bench`` alone: the package)."""
    package = path.parent
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if _in_package(alias.name)}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == PACKAGE:  # ``from tools.bench import orders``: a module, or a name
                found |= {
                    f"{PACKAGE}.{alias.name}"
                    if (package / f"{alias.name}.py").exists()
                    else PACKAGE
                    for alias in node.names
                }
            elif _in_package(node.module):
                found.add(node.module)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    return {
        PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}": bench_imports(path)
        for path in sorted(package.glob("*.py"))
    }


def find_circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle (its modules, the first repeated at the end), or []."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        for imported in sorted(graph.get(module, ())):
            if circle := visit(imported, [*path, module]):
                return circle
        done.add(module)
        return []

    for module in sorted(graph):
        if circle := visit(module, []):
            return circle
    return []


def test_the_bench_has_no_import_circle():
    circle = find_circle(import_graph(BENCH))

    assert circle == [], " -> ".join(circle)


def test_a_circle_is_found_even_through_a_deferred_import(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from tools.bench import b\n")
    (tmp_path / "b.py").write_text("def later():\n    from tools.bench.a import x\n")
    (tmp_path / "c.py").write_text("import tools.bench.b\n")

    assert find_circle(import_graph(tmp_path)) == [
        "tools.bench.a",
        "tools.bench.b",
        "tools.bench.a",
    ]

"""The bench's modules import each other without a circle.

Read from the source (``ast``), not by importing: every ``import`` counts,
including those inside functions, which run later but still tie two modules
together (a circle through a deferred import is how the bench once had
``__main__`` and a suite each reaching for the other).
"""

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_imports(path: Path) -> set[str]:
    """The ``bench`` modules ``path`` imports (``bench`` alone: the package)."""
    package = path.parent
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "bench"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "bench":  # ``from bench import orders``: a module, or a name
                found |= {
                    f"bench.{alias.name}" if (package / f"{alias.name}.py").exists() else "bench"
                    for alias in node.names
                }
            elif node.module.split(".")[0] == "bench":
                found.add(node.module)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    return {
        "bench" if path.stem == "__init__" else f"bench.{path.stem}": bench_imports(path)
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
    (tmp_path / "a.py").write_text("from bench import b\n")
    (tmp_path / "b.py").write_text("def later():\n    from bench.a import x\n")
    (tmp_path / "c.py").write_text("import bench.b\n")

    assert find_circle(import_graph(tmp_path)) == ["bench.a", "bench.b", "bench.a"]

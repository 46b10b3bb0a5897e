"""The package's shape: imports of our own modules at the top of each file, flowing one way (no cycle).

A cycle is what tied dataset, env, mutation, rewards and train_local together before the modules
were cut by job; an import hidden in a function body is how such a cycle goes unnoticed.
"""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "harness"


def harness_imports() -> dict[str, list[tuple[str, bool]]]:
    """module -> [(imported harness module, at top level?)] for every harness/*.py."""
    graph: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted(HARNESS.glob("*.py")):
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        edges = []
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module == "harness":
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness."):
                names = [node.module.split(".")[1]]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("harness.")]
            edges += [(name, id(node) in top) for name in names if name != path.stem]
        graph[path.stem] = edges
    return graph


def find_cycle(graph: dict[str, list[str]]) -> list[str]:
    """One cycle as a path of module names, or [] (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in graph:
        if node not in state and (found := visit(node)):
            return found
    return []


def test_find_cycle_finds_one():
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) == []


def test_harness_has_no_import_cycle():
    graph = {module: [name for name, _ in edges] for module, edges in harness_imports().items()}
    assert set(graph) >= {"config", "dataset", "rewards", "search", "env", "pipeline"}
    assert find_cycle(graph) == []


def test_intra_package_imports_sit_at_the_top_of_the_module():
    hidden = [f"{module} imports harness.{name} inside a function"
              for module, edges in harness_imports().items() for name, top in edges if not top]
    assert hidden == []


def test_no_module_but_the_sandbox_runner_is_over_450_lines():
    """STYLE.md's module size; sandbox_runner.py, run as a script inside the sandbox, is the one exception."""
    long = {path.name: n for path in HARNESS.glob("*.py")
            if path.name != "sandbox_runner.py" and (n := len(path.read_text().splitlines())) > 450}
    assert long == {}

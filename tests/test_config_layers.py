"""sweeprl.config sits low in the layering (cli -> trial/report -> analysis/training -> config/study/tracking):
it imports no higher layer and has no import cycle, counting imports inside functions too."""

from __future__ import annotations

import ast

from conftest import REPO

SRC = REPO / "src"
CONFIG = SRC / "sweeprl" / "config"
ALLOWED_OUTSIDE = {"sweeprl.trial_record", "sweeprl.tracking"}  # same layer or the shared trial-dir contract


def module_name(path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sweeprl_imports(path) -> set:
    """Every sweeprl module ``path`` imports, at module level or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("sweeprl.") or m == "sweeprl"}


def owner(dotted: str, modules) -> str:
    """The longest module name that ``dotted`` is or is inside of."""
    candidates = [m for m in modules if dotted == m or dotted.startswith(m + ".")]
    return max(candidates, key=len) if candidates else None


def test_config_imports_no_higher_layer_and_has_no_cycle():
    modules = {module_name(p): p for p in CONFIG.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = sweeprl_imports(path)
        upward = {d for d in deps if not d.startswith("sweeprl.config") and owner(d, ALLOWED_OUTSIDE) is None}
        assert not upward, f"{name} imports {upward}"
        # an edge to the module a dependency names (sweeprl.config.fields.f -> sweeprl.config.fields)
        graph[name] = {owner(d, modules) for d in deps if d.startswith("sweeprl.config")} - {name, None}
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph[node]:
            assert state.get(nxt) != "open", "import cycle: " + " -> ".join([*stack, nxt])
            if nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])

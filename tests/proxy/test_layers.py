"""proxy/'s layers: every module imports only from its own layer or those below, and no import circles.

Type-only imports (under TYPE_CHECKING) and imports inside functions count too: a circle through them is
still a circle for whoever reads the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# bottom to top; a top-level module is its own layer
LAYERS = ["wire", "backends", "plan", "runtime", "ddl", "exec", "session", "manager", "metrics", "workers", "server"]
UNLAYERED = {"proxy", "proxy.log"}   # the package itself, and logging set-up any layer may use


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (ROOT / "proxy").rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _imports(mod: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The proxy modules a module imports, anywhere in it."""
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.add(sub if sub in mods else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in mods and m != mod}


def _layer(mod: str) -> int | None:
    if mod in UNLAYERED:
        return None
    return LAYERS.index(mod.split(".")[1])


def test_every_proxy_module_has_a_layer() -> None:
    for mod in _modules():
        if mod not in UNLAYERED:
            assert mod.split(".")[1] in LAYERS, f"{mod}: put it in a layer (tests/proxy/test_layers.py LAYERS)"


def test_imports_flow_down_the_layers() -> None:
    mods = _modules()
    upward = []
    for mod, path in mods.items():
        own = _layer(mod)
        for dep in _imports(mod, path, mods):
            theirs = _layer(dep)
            if own is not None and theirs is not None and theirs > own:
                upward.append(f"{mod} -> {dep}")
    assert not upward, "imports running up the layers: " + ", ".join(sorted(upward))


def test_no_import_circles() -> None:
    mods = _modules()
    graph = {mod: _imports(mod, path, mods) for mod, path in mods.items()}
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(mod: str) -> list[str] | None:
        state[mod] = 1
        stack.append(mod)
        for dep in sorted(graph[mod]):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (circle := visit(dep)) is not None:
                return circle
        stack.pop()
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state:
            circle = visit(mod)
            assert circle is None, "import circle: " + " -> ".join(circle)

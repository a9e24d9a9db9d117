"""The packages are layers that import downward only, with no import circle between modules.

LAYERS lists them from the ground up. A module may import its own layer and those below it; any import
that reaches up is listed with its line (deferred imports inside functions count the same, since they
only hide a circle). ARCHITECTURE.md draws the same order.
"""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

API = "trainplan (the public API)"
PUBLIC_API_MODULE = "trainplan._api"   # the signatures trainplan/__init__.py re-exports (trainplan/api_gen.py)
LAYERS: list[tuple[str, str]] = [
    ("trainplan.tools.core", "tools/core"),
    ("trainplan.tools.hardware", "tools/hardware"),
    ("trainplan.tools.config", "tools/config"),
    ("trainplan.tools.perf", "tools/perf"),
    ("trainplan.tools.search", "tools/search"),
    ("trainplan.tools.engines", "tools/engines"),
    ("trainplan.prompts", "prompts"),
    ("trainplan.agent", "agent"),
    (API, "trainplan"),
    ("trainplan.evals", "evals"),
    ("trainplan", "trainplan"),
]
"""(package, folder) from the ground up. The public API (trainplan/__init__.py: estimate, search, plan) sits
above agent and below evals, which call it; the CLI (the other modules of trainplan/) is the top floor."""


def _module_of(path: Path) -> str:
    for package, folder in LAYERS:
        if package == API:
            continue
        base = ROOT / folder
        if base in path.parents or path.parent == base:
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join([package, *parts])
    raise AssertionError(f"{path} is in no layer")


def _layer_of(module: str) -> int | None:
    if module in ("trainplan", PUBLIC_API_MODULE) or module.startswith(PUBLIC_API_MODULE + "."):
        return [package for package, _ in LAYERS].index(API)
    best = None
    for index, (package, _) in enumerate(LAYERS):
        if module == package or module.startswith(package + "."):
            if best is None or len(package) > len(LAYERS[best][0]):
                best = index
    return best


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import of ours in the file, module level or deferred."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name == "trainplan" or name.startswith("trainplan.")]


def _sources() -> list[Path]:
    files = []
    for package, folder in LAYERS:
        if package == API:
            continue
        base = ROOT / folder
        files += sorted(p for p in base.glob("*.py")) if folder in ("trainplan", "prompts", "evals", "agent") else \
            sorted(base.rglob("*.py"))
    return files


def _graph() -> dict[str, set[str]]:
    modules = {_module_of(p): p for p in _sources()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for _, name in _imports(path, module):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                graph[module].add(name)
    return graph


def test_layers_import_downward_only():
    upward = []
    for path in _sources():
        module = _module_of(path)
        own = _layer_of(module)
        for line, name in _imports(path, module):
            target = _layer_of(name)
            if target is not None and target > own:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {module} -> {name}")
    assert not upward, "imports that reach up a layer:\n" + "\n".join(sorted(set(upward)))


def test_no_import_circle():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:          # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_importing_the_calculators_loads_no_layer_above_them():
    """At run time too: importing every tools/ module (what `import` statements and package data reads do)
    loads no module of agent, prompts, evals or the CLI. An import the AST check cannot see, such as
    importlib.resources reading a package that imports its own modules, shows here."""
    import subprocess
    import sys

    modules = sorted(m for m in (_module_of(p) for p in _sources()) if m.startswith("trainplan.tools"))
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            timeout=120).stdout.split()
    above = [m for m in loaded if m.startswith(("trainplan.agent", "trainplan.prompts", "trainplan.evals.",
                                                 "trainplan.cli"))]
    assert len(modules) > 40
    assert not above, f"tools/ loads modules of a higher layer: {above}"

"""The library's import graph, read from the source (every import statement: module level,
inside functions and classes, under `if TYPE_CHECKING`): no cycle between modules, none between
packages (`selfplay_core.<first part>`), no Prefect anywhere in `selfplay_core`, and the toy world
a plug-in: no module outside `selfplay_core/toyworld/` imports it (by statement or by name).

A function-local import is no way around a cycle here: the graph includes it. Lazy imports of
heavy optional dependencies (torch, vllm, peft, mlflow, ...) are outside the graph, since only
`selfplay_core` modules are nodes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "selfplay_core"


def modules() -> dict[str, Path]:
    out = {}
    for f in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imported_names(name: str, path: Path) -> list[tuple[str, int]]:
    """(dotted name, line) of everything a module imports: for `from X import Y` both X.Y and
    X (one of them is a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out += [(f"{mod}.{a.name}", node.lineno) for a in node.names] + [(mod, node.lineno)]
    return out


def graph() -> dict[str, dict[str, int]]:
    """module -> {imported selfplay_core module: line}. `from X import Y` points at X.Y when
    that is a module, else at X; an import of a package's submodule does not count as an
    import of the package's own __init__."""
    mods = modules()
    edges: dict[str, dict[str, int]] = {m: {} for m in mods}
    for m, path in mods.items():
        names = imported_names(m, path)
        for target, line in names:
            if target.startswith(PACKAGE) and target in mods and target != m:
                # `from X import Y` yields both X.Y and X: X only counts when X.Y is not a module.
                if any(t.startswith(target + ".") and t in mods and l == line for t, l in names):
                    continue
                edges[m].setdefault(target, line)
    return edges


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str):
        state[v] = 1
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(edges):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_function_level_imports_are_edges(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from selfplay_core.loop import driver\n    import selfplay_core.stages\n")
    got = {n for n, _ in imported_names("selfplay_core.m", f)}
    assert {"selfplay_core.loop.driver", "selfplay_core.stages"} <= got


def _describe(path: list[str], edges) -> str:
    return " -> ".join(f"{a} (line {edges[a][b]})" for a, b in zip(path, path[1:])) + f" -> {path[-1]}"


def test_no_module_import_cycle():
    edges = graph()
    cycle = find_cycle({m: set(t) for m, t in edges.items()})
    assert cycle is None, "import cycle: " + _describe(cycle, edges)


def test_no_package_import_cycle():
    edges = graph()
    pkgs: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for m, targets in edges.items():
        for t, line in targets.items():
            a, b = package_of(m), package_of(t)
            if a != b:
                pkgs.setdefault(a, set()).add(b)
                where.setdefault((a, b), f"{m}:{line} imports {t}")
    cycle = find_cycle(pkgs)
    assert cycle is None, "package cycle " + " -> ".join(cycle) + ":\n" + "\n".join(
        where[(a, b)] for a, b in zip(cycle, cycle[1:]))


def test_no_prefect_in_the_library():
    bad = [f"{m}:{line} imports {n}" for m, path in modules().items()
           for n, line in imported_names(m, path) if n == "prefect" or n.startswith("prefect.")]
    assert not bad, bad


@pytest.mark.parametrize("module", ["selfplay_core.config", "selfplay_core.methods",
                                    "selfplay_core.loop.driver"])
def test_key_modules_are_in_the_graph(module):
    assert module in graph()


def test_the_library_holds_and_imports_no_study_code():
    """Studies (the learning study's runner, the lab's scripts) build on the library, never
    the other way round."""
    assert not (ROOT / PACKAGE / "study").exists()
    bad = [f"{m}:{line} imports {n}" for m, path in modules().items()
           for n, line in imported_names(m, path)
           if n.split(".")[0] in ("selfplay_study", "benchmarks", "tools")]   # lab/: test_layout
    assert not bad, bad


# ---- the toy world is a plug-in ----------------------------------------------------------------

TOY = "selfplay_core.toyworld"
# The one module that names it: the world plug-in list, which imports it by name at run time.
PLUGIN_LIST = "selfplay_core/worlds/plugins.py"
# The toy world's own front-ends outside the library (Prefect may not be imported there): the
# `selfplay bootstrap` command, and the bootstrap deployment's flow and task.
TOY_FRONT_ENDS = {"selfplay_cli/bootstrap.py", "flows/bootstrap_toy_model.py", "tasks/toyworld.py"}
FIRST_PARTY = ("selfplay_core", "selfplay_cli", "selfplay_study", "flows", "tasks", "tools")
_TOY_NAME = re.compile(r"selfplay_core\.toyworld(\.\w+)*")


def toy_references(name: str, path: Path) -> list[str]:
    """Where a module imports the toy package: import statements, and string constants that
    are its module names (importlib.import_module("selfplay_core.toyworld...")). Docstrings
    and prose that mention it are not references."""
    out = [f"line {line}: imports {n}" for n, line in imported_names(name, path)
           if n == TOY or n.startswith(TOY + ".")]
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and _TOY_NAME.fullmatch(node.value):
            out.append(f"line {node.lineno}: names {node.value!r}")
    return out


def test_toy_references_are_found(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Mentions selfplay_core.toyworld in prose."""\nimport importlib\n\n'
                 "def g():\n    from selfplay_core.toyworld import splits\n"
                 '    return importlib.import_module("selfplay_core.toyworld.world")\n')
    got = toy_references("selfplay_core.m", f)
    assert got == ["line 5: imports selfplay_core.toyworld.splits",
                   "line 5: imports selfplay_core.toyworld",
                   "line 6: names 'selfplay_core.toyworld.world'"]


def test_no_module_outside_the_toy_world_imports_it():
    bad = []
    for top in FIRST_PARTY:
        for f in sorted((ROOT / top).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel.startswith("selfplay_core/toyworld/") or rel in TOY_FRONT_ENDS or rel == PLUGIN_LIST:
                continue
            name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
            bad += [f"{rel} {r}" for r in toy_references(name, f)]
    assert not bad, "the toy world is a plug-in (selfplay_core/worlds/plugins.py):\n" + "\n".join(bad)


def test_the_plugin_list_is_what_loads_the_toy_world():
    refs = toy_references("selfplay_core.worlds.plugins", ROOT / PLUGIN_LIST)
    assert [r.split(": ", 1)[1] for r in refs] == ["names 'selfplay_core.toyworld.world'"]

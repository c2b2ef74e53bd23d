"""No import circles in lerobench: every ``import`` of a lerobench module is an edge, wherever it is written.

Function-level (lazy) imports and ``if TYPE_CHECKING:`` imports count too: a lazy import inside a circle still
ties the two modules together (either can only be understood, tested or moved with the other), and a type
checker follows TYPE_CHECKING imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lerobench"


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module under the package directory ``root``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _walk(tree: ast.AST, runtime_only: bool):
    """``ast.walk``, optionally without the bodies of ``if TYPE_CHECKING:`` blocks (imports a type checker follows)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if runtime_only and _type_checking_block(node):
            todo.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        todo.extend(ast.iter_child_nodes(node))


def import_graph(root: Path, runtime_only: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from a import b`` is an edge to ``a.b`` when that is a module).

    ``runtime_only``: leave out imports inside ``if TYPE_CHECKING:`` (they never run).
    """
    modules = module_names(root)

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _walk(ast.parse(path.read_text(encoding="utf-8")), runtime_only):
            if isinstance(node, ast.Import):
                edges |= {owner(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for a in node.names:
                    full = f"{base}.{a.name}"
                    edges.add(full if full in modules else owner(base))
        graph[name] = {e for e in edges if e and e != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_lerobench_has_no_import_circles():
    graph = import_graph(PACKAGE)
    assert "lerobench.envs.base" in graph["lerobench.plan.planner"]  # the walk sees real edges
    assert "lerobench.stats.binomial" in graph["lerobench.core.trials"]
    found = cycles(graph)
    assert found == [], "import circles: " + "; ".join(
        " <-> ".join(f"{m} (imports {sorted(graph[m] & set(c))})" for m in c) for c in found)


def package_of(module: str, root: Path = PACKAGE) -> str:
    """``lerobench.plan.planner`` -> ``lerobench.plan``; a top-level module (``lerobench.errors``) is its own node."""
    parts = module.split(".")
    if len(parts) >= 2 and (root / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed onto packages (``lerobench.core``, ``lerobench.plan``, ...), self-edges dropped."""
    packages: dict[str, set[str]] = {}
    for module, edges in graph.items():
        here = package_of(module)
        packages.setdefault(here, set()).update(p for p in map(package_of, edges) if p != here)
    return packages


GROUND_FLOOR = ("lerobench.core", "lerobench.stats", "lerobench.errors", "lerobench.system", "lerobench._version",
                "lerobench.environment")
"""Plain data and pure functions every stage may import; they import no stage (docs/architecture.md)."""


def test_the_package_graph_has_no_loop():
    """No two packages import each other, directly or around a loop (runtime imports; TYPE_CHECKING aside).

    Plain data that several stages share lives on the ground floor (``core``, ``stats``), so each import points
    from the stage that uses a thing to the one that defines it.
    """
    graph = import_graph(PACKAGE, runtime_only=True)
    packages = package_graph(graph)
    assert {"lerobench.core", "lerobench.plan", "lerobench.rollout"} <= set(packages)
    found = cycles(packages)
    edges = "; ".join(
        " -> ".join(c) + ": " + ", ".join(f"{m} imports {sorted(e for e in graph[m] if package_of(e) in c)}"
                                         for m in graph if package_of(m) in c
                                         and any(package_of(e) in c and package_of(e) != package_of(m)
                                                 for e in graph[m]))
        for c in found)
    assert found == [], "package loops: " + edges


LAYERS = (
    ("lerobench.environment",),
    ("lerobench.errors", "lerobench.extras", "lerobench.system", "lerobench.streams", "lerobench._version"),
    ("lerobench.stats",),
    ("lerobench.core",),
    ("lerobench.suite",),
    ("lerobench.envs",),
    ("lerobench.policies",),
    ("lerobench.plan",),
    ("lerobench.output",),
    ("lerobench.rollout",),
    ("lerobench.execution",),
    ("lerobench.analysis", "lerobench.trackers"),
    ("lerobench.arguments",),
    ("lerobench.api", "lerobench.doctor"),
    ("lerobench.cli",),
    ("lerobench", "lerobench.__main__"),
)
"""docs/architecture.md's picture, bottom up: a package imports only packages of lower layers (or its own)."""


def test_every_import_points_down_the_layers_of_docs_architecture():
    rank = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    packages = package_graph(import_graph(PACKAGE, runtime_only=True))
    assert set(packages) <= set(rank), f"packages missing from LAYERS: {sorted(set(packages) - set(rank))}"
    upward = sorted(f"{a} -> {b}" for a, edges in packages.items() for b in edges if rank[b] > rank[a]
                    or (rank[b] == rank[a] and a != b))
    assert not upward, f"imports against the layers: {upward}"


def test_the_ground_floor_imports_no_stage():
    graph = import_graph(PACKAGE, runtime_only=True)
    for module, edges in graph.items():
        if package_of(module).startswith(GROUND_FLOOR):
            upward = sorted(e for e in edges if not package_of(e).startswith(GROUND_FLOOR))
            assert not upward, f"{module} (ground floor) imports {upward}"


def test_the_package_walk_finds_a_loop_through_a_lazy_import_but_not_a_type_only_one(tmp_path):
    pkg = tmp_path / "pkg"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "a.py").write_text("from pkg.low.b import x\n")
    (pkg / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high import a\n")
    assert cycles(package_graph_of(pkg, runtime_only=True)) == []
    (pkg / "low" / "c.py").write_text("def f():\n    from pkg.high import a\n")
    assert cycles(package_graph_of(pkg, runtime_only=True)) == [["pkg.high", "pkg.low"]]


def package_graph_of(root: Path, runtime_only: bool) -> dict[str, set[str]]:
    graph = import_graph(root, runtime_only)
    packages: dict[str, set[str]] = {}
    for module, edges in graph.items():
        here = package_of(module, root)
        packages.setdefault(here, set()).update(p for p in (package_of(e, root) for e in edges) if p != here)
    return packages


def test_the_walk_finds_a_lazy_circle(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import x\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n")
    (pkg / "c.py").write_text("def f():\n    from . import a\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]


HEAVY_FOR_LIST = ("pydantic", "numpy", "scipy", "torch", "mujoco", "ray", "matplotlib", "gymnasium", "av",
                  "lerobench.suite.config", "lerobench.plan.stopping", "lerobench.analysis", "lerobench.stats",
                  "lerobench.plan.planner")
"""What `lerobench list` must not import: it reads TOML tables and prints one table (benchmarks/cli_startup.py)."""


def test_list_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys\nsys.argv = ['lerobench', 'list']\nfrom lerobench.cli import main\ntry:\n    main()\n"
            "except SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
            f"heavy = {HEAVY_FOR_LIST!r}\n"
            "print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr
    assert "libero_spatial" in done.stdout  # it listed the suites
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_importing_lerobench_changes_no_process_wide_state():
    """``lerobench.evaluate`` leaves the caller's process as it found it: no warning filter, signal handler or
    forkserver preload list is changed by importing any module (the CLI sets what it needs when it runs)."""
    import subprocess
    import sys

    script = f"""
import importlib, multiprocessing, signal, sys, warnings
import numpy, gymnasium  # third-party imports may set their own filters: taken before ours
filters = list(warnings.filters)
handlers = {{s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}}
for name in {sorted(module_names(PACKAGE))!r}:
    if name.endswith("__main__"):
        continue
    try:
        importlib.import_module(name)
    except ImportError:
        pass
changed = [f for f in warnings.filters if f not in filters]
assert not changed, f"warning filters added at import: {{changed}}"
assert handlers == {{s: signal.getsignal(s) for s in handlers}}, "signal handlers changed at import"
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def _patched_lerobench_globals(path: Path) -> list[str]:
    """``monkeypatch.setattr``/``setattr`` calls in ``path`` targeting a lerobench module or one of its globals."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    ours: set[str] = set()  # names bound to lerobench modules or their globals in this file
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            ours |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("lerobench")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lerobench"):
            ours |= {a.asname or a.name for a in node.names}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in ("setattr", "setitem", "delattr"):
            continue
        target = node.args[0]
        while isinstance(target, ast.Attribute):
            target = target.value
        literal = isinstance(target, ast.Constant) and str(target.value).startswith("lerobench")
        if literal or (isinstance(target, ast.Name) and target.id in ours):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_test_or_benchmark_patches_a_lerobench_global():
    """Rules and switches are passed in (``RunSettings``, ``ScheduleRules``, ``share_task``), never patched."""
    root = PACKAGE.parent
    found = [hit for folder in ("tests", "benchmarks") for path in sorted((root / folder).rglob("*.py"))
             for hit in _patched_lerobench_globals(path)]
    assert found == [], f"lerobench globals patched at {found}"


def test_the_patch_finder_sees_a_patch(tmp_path):
    source = tmp_path / "t.py"
    source.write_text("import lerobench.rollout.loop as loop\nfrom lerobench.cli import evaluate\n"
                      "def test(monkeypatch):\n    monkeypatch.setattr(loop, 'x', 1)\n"
                      "    monkeypatch.setattr(evaluate.console, 'y', 2)\n    monkeypatch.setattr('lerobench.a.b', 3)\n"
                      "    monkeypatch.setattr(other, 'z', 4)\n")
    assert _patched_lerobench_globals(source) == ["t.py:4", "t.py:5", "t.py:6"]


def test_only_the_environment_module_reads_or_sets_environment_variables():
    """Issue 47: ``os.environ``, ``os.getenv`` and ``os.putenv`` appear in ``lerobench/environment.py`` only."""
    import ast

    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "environment.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                    any(a.name in ("environ", "getenv", "putenv") for a in node.names):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == [], f"environment variables touched outside lerobench/environment.py: {found}"


def test_every_environment_variable_is_in_the_usage_docs():
    from lerobench.environment import VARIABLES

    text = (PACKAGE.parent / "docs" / "usage.md").read_text()
    table = text[text.index("## Environment variables"):]
    missing = [name for name in VARIABLES if f"`{name}" not in table]
    assert missing == [], f"docs/usage.md's environment table lacks {missing}"


MAX_FUNCTION_LINES = 80
"""Issue 47: a function a reader must hold in their head at once; signature and docstring count."""


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (N lines)`` for every function under ``root`` longer than ``limit`` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_the_package_is_longer_than_80_lines():
    assert long_functions(Path(__file__).resolve().parent.parent / "lerobench") == []


def test_the_length_check_sees_a_long_function(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 80 + "\n\ndef g():\n    pass\n")
    assert long_functions(tmp_path) == [f"{tmp_path / 'm.py'}:1 f (81 lines)"]

"""The layering of docs/architecture.md, read from the source: dependencies point
cli -> flavors -> governance, the domain layer never imports MLflow, and no two modules
import each other, directly or through others (lazy imports inside functions count)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "miret_governance"
LAYERS = ("cli", "flavors", "governance")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([NAMESPACE, *parts])


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for layer in LAYERS
        for path in sorted((ROOT / layer).rglob("*.py"))
    }


def _imports(path: Path, modules) -> set[str]:
    """Every module of the package ``path`` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def _graph():
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def test_the_package_has_modules_in_every_layer():
    modules = _modules()
    for layer in LAYERS:
        assert f"{NAMESPACE}.{layer}" in modules
    assert f"{NAMESPACE}.flavors.miret" in modules
    assert f"{NAMESPACE}.governance.miret.milp.formulation" in modules


def test_no_import_cycles():
    graph = _graph()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            # a package __init__ that re-exports its modules is not a cycle with them
            if target.startswith(node + "."):
                continue
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
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert cycles == []


def test_dependencies_point_one_way():
    graph = _graph()
    below = {"cli": ("cli", "flavors", "governance"), "flavors": ("flavors", "governance")}
    below["governance"] = ("governance",)
    wrong = [
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if target.split(".")[1] not in below[source.split(".")[1]]
    ]
    assert wrong == []


def test_the_domain_layer_never_imports_mlflow():
    offenders = []
    for path in sorted((ROOT / "governance").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [(path.name, n) for n in names if n.split(".")[0] == "mlflow"]
    assert offenders == []


ALLOWED_BUILTIN_RAISES = {
    # Python's own protocols: attribute lookup on a module or an immutable record
    ("AttributeError", "__getattr__"),
    ("AttributeError", "__setattr__"),
    # a signal turned back into the exception Python gives it (governance/miret/solvers/gurobi.py)
    ("KeyboardInterrupt", "*"),
}


def test_no_bare_builtin_exception_is_raised():
    """Every error the product raises derives from GovernanceError (with a built-in as a
    second base where scikit-learn's conventions expect one: governance/errors.py), so a
    caller catches one class; Python's attribute protocol and signals are the exceptions."""
    import builtins

    builtin = {
        name
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    found = []
    for path in _modules().values():
        tree = ast.parse(path.read_text())
        enclosing = {}  # node -> name of the innermost function around it
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    enclosing[node] = function.name  # inner functions come later: they win
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            kind = raised.id if isinstance(raised, ast.Name) else None
            allowed = {(kind, enclosing.get(node, "")), (kind, "*")} & ALLOWED_BUILTIN_RAISES
            if kind in builtin and not allowed:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} raise {kind}")
    assert sorted(set(found)) == []


def test_tests_follow_the_rooms():
    """Every folder of tests/governance and tests/flavors mirrors a package folder (a room),
    so a module's tests are found where the module is."""
    tests = ROOT / "tests"
    rooms = [
        folder.relative_to(tests)
        for layer in ("governance", "flavors")
        for folder in (tests / layer).rglob("*")
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("test_*.py"))
    ]
    assert len(rooms) >= 10
    # tests/flavors/spark: the Spark tests of every command, next to one another
    unmirrored = [room for room in rooms if not (ROOT / room / "__init__.py").is_file()]
    assert unmirrored in ([], [Path("flavors/spark")])

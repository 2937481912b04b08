"""The shape of the code: imports run one way without cycles, `import wfst` stays light,
kernels take their arrays in groups, and every deliberate error is a WfstError."""
from __future__ import annotations

import ast
import builtins
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"wfst": ROOT / "wfst", "wfst.kernels": ROOT / "kernels", "wfst.graphs": ROOT / "graphs",
            "wfst_bench": ROOT / "benchmarks"}
RUNTIME = ("wfst", "wfst.kernels", "wfst.graphs")  # what a user's install runs


def within(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def modules() -> dict[str, ast.Module]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


def imports(name: str, tree: ast.Module) -> set[str]:
    """The package's modules that `name` imports, at module level or inside functions."""
    package = name if name in PACKAGES else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            submodules = {f"{base}.{a.name}" for a in node.names}
            out |= submodules if submodules & set(modules_cache()) else {base}
    known = modules_cache()
    return {m for m in out if m in known and m != name}


_MODULES = None


def modules_cache():
    global _MODULES
    if _MODULES is None:
        _MODULES = modules()
    return _MODULES


def test_no_import_cycle_anywhere():
    graph = {name: imports(name, tree) for name, tree in modules_cache().items()}
    state: dict[str, int] = {}

    def visit(m, path):
        if state.get(m) == 1:
            pytest.fail("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if state.get(m) == 2:
            return
        state[m] = 1
        for n in sorted(graph[m]):
            visit(n, path + [m])
        state[m] = 2

    for m in graph:
        visit(m, [])


@pytest.mark.parametrize("importer,forbidden", [
    ("wfst.kernels", ("wfst", "wfst_bench")),  # kernels compute and know nothing else
    ("wfst", ("wfst.graphs", "wfst_bench")),  # the runtime never needs the compiler or the benchmarks
    ("wfst.graphs", ("wfst_bench",)),
])
def test_imports_run_one_way(importer, forbidden):
    for name, tree in modules_cache().items():
        if not within(name, importer) or (importer == "wfst" and within(name, "wfst.kernels", "wfst.graphs")):
            continue
        for m in imports(name, tree):
            if importer == "wfst.kernels" and within(m, "wfst.kernels"):
                continue
            assert not within(m, *forbidden), f"{name} imports {m}"


def test_runtime_runs_no_git_or_pip():
    """Only the benchmarks' recipes may call git or make virtual environments."""
    for name, tree in modules_cache().items():
        if not within(name, *RUNTIME):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                words = node.value.split()
                assert not {"git", "pip", "venv", "ensurepip"} & set(words), f"{name}:{node.lineno}: {node.value!r}"


def test_import_wfst_is_light():
    code = ("import sys, wfst; heavy = [m for m in ('numba', 'matplotlib', 'pynini', 'torch', 'cupy') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_error_is_exported():
    import wfst
    import wfst.errors

    classes = {n for n, v in vars(wfst.errors).items() if isinstance(v, type) and issubclass(v, wfst.WfstError)}
    assert classes <= set(wfst.__all__)


def _decorators(fn: ast.FunctionDef) -> list[str]:
    return [ast.unparse(d) for d in fn.decorator_list]


def test_kernel_entries_take_at_most_15_parameters():
    for name, tree in modules_cache().items():
        if not within(name, "wfst.kernels"):
            continue
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and any("jit" in d for d in _decorators(fn)):
                assert len(fn.args.args) <= 15, f"{name}.{fn.name} takes {len(fn.args.args)} parameters"


BUILTIN_ERRORS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
ALLOWED = {"AssertionError", "NotImplementedError", "KeyboardInterrupt"}  # bugs, not user errors


def test_every_deliberate_error_is_a_wfst_error():
    for name, tree in modules_cache().items():
        if not within(name, *RUNTIME):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                raised = ast.unparse(exc)
                assert raised not in BUILTIN_ERRORS - ALLOWED, f"{name}:{node.lineno} raises {raised}"

"""Every arrow points down: tiling_model (the ground floor) imports and includes nothing of ours,
model_tools (its command line, calibration, plots, explanations) and kernel use only tiling_model, tuner
all three, service tiling_model, model_tools and one module of kernel (``kernel.sources``: were
the tables tuned for these kernel sources?), never the tuner (it reads the tables the tuner wrote).
Read from the sources (Python imports by ``ast``, C++ ``#include "..."`` lines), so a new arrow back up
fails here before anyone imports it."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("tiling_model", "model_tools", "kernel", "tuner", "service", "bcetune")
#: what each package may import of ours (itself aside): packages, or single modules
ALLOWED = {
    "tiling_model": set(),
    "model_tools": {"tiling_model"},
    "kernel": {"tiling_model"},
    "tuner": {"tiling_model", "model_tools", "kernel"},
    "service": {"tiling_model", "model_tools", "kernel.sources"},
}


def imported_modules(source: Path) -> set[str]:
    """Modules of ours a Python file imports (``from . import`` stays inside its package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found.update(n for n in names if n.split(".")[0] in OURS)
    return found


def not_allowed(module: str, package: str) -> bool:
    return not any(module == a or module.startswith(a + ".") for a in ALLOWED[package] | {package})


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_python_imports_point_down(package: str) -> None:
    wrong = {
        str(f.relative_to(ROOT)): sorted(m for m in imported_modules(f) if not_allowed(m, package))
        for f in sorted((ROOT / package).rglob("*.py"))
    }
    assert not {f: up for f, up in wrong.items() if up}, "imports of a package above (or beside) it"


def test_the_ground_floors_cpp_includes_only_its_own_headers() -> None:
    """tiling_model's C++ (the engine and its binding) includes only files under tiling_model: the CANN
    build's op_host includes the engine, never the other way round."""
    sources = [p for ext in ("*.cpp", "*.h") for p in (ROOT / "tiling_model").rglob(ext)]
    assert sources, "no C++ under tiling_model: the check would prove nothing"
    own = {p.name for p in sources}
    outside = {
        str(p.relative_to(ROOT)): include
        for p in sources
        for include in re.findall(r'^\s*#include\s+"([^"]+)"', p.read_text(), re.MULTILINE)
        if Path(include).name not in own or ".." in include
    }
    assert not outside, f"includes from outside tiling_model: {outside}"


def test_the_checks_see_an_arrow_back_up(tmp_path: Path) -> None:
    """The import reader finds what it must (a negative control for the test above)."""
    f = tmp_path / "m.py"
    f.write_text("import os\nfrom service.app import create_app\nimport kernel.npu as npu\nfrom . import x\n")
    assert imported_modules(f) == {"service.app", "kernel.npu"}
    assert not_allowed("kernel.npu", "service") and not not_allowed("kernel.sources", "service")


def test_no_code_that_answers_imports_the_specification() -> None:
    """The cost model's NumPy specification (tiling_model/simulate.py) is only read by the tests that hold
    the engine equal to it (and a benchmark): what the engine's wrapper and the specification share lives
    in tiling_model/model_types.py, so the specification can be edited as one without breaking serving."""
    readers = sorted(
        str(f.relative_to(ROOT))
        for package in OURS
        for f in (ROOT / package).rglob("*.py")
        if f.name != "simulate.py" and any(m == "tiling_model.simulate" for m in imported_modules(f))
    )
    assert not readers, f"modules that answer import the specification: {readers}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _load_time_imports(source: Path, modules: set[str]) -> set[str]:
    """Modules of ours a file imports when it is loaded: module-level statements, class bodies and
    if/try blocks (a function's import runs when called; ``if TYPE_CHECKING:`` never does). A
    ``from package import name`` is an arrow to ``package.name`` when that is a module, else to the
    package; relative imports are resolved."""
    here = _module_name(source)
    package = here if source.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(max(node.level - 1, 0)):
                    base = base.rpartition(".")[0]
                module = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
                for alias in node.names:
                    if f"{module}.{alias.name}" in modules:
                        found.add(f"{module}.{alias.name}")
                    elif module in modules:
                        found.add(module)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit(inner)
            for handler in getattr(node, "handlers", []):
                visit(handler.body)

    visit(ast.parse(source.read_text(), str(source)).body)
    found.discard(here)
    return found


def import_cycles(files: list[Path], extensions: set[str] = frozenset()) -> list[list[str]]:
    """The groups of modules that import each other in a loop at load time (strongly connected
    components of more than one module, or a module importing itself through others)."""
    modules = {_module_name(f) for f in files} | set(extensions)
    graph = {_module_name(f): _load_time_imports(f, modules) for f in files}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group: list[str] = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


#: compiled modules (a binding's import of them is an arrow like any other)
EXTENSIONS = {"tiling_model._engine"}


def test_no_modules_import_each_other_in_a_loop() -> None:
    files = [f for package in OURS for f in (ROOT / package).rglob("*.py")]
    assert len(files) > 50, "the check would prove nothing"
    assert not import_cycles(files, EXTENSIONS), "modules that import each other in a loop"


def test_the_cycle_check_finds_a_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A negative control: a loop through a relative import and a package's re-export is found; an
    import inside a function or under TYPE_CHECKING is not an arrow."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import A\n")
    (pkg / "a.py").write_text("from .b import B\nA = 1\n")
    (pkg / "b.py").write_text("from pkg import a\nB = 2\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n")
    (pkg / "d.py").write_text("def f():\n    from pkg import c\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert import_cycles(sorted(pkg.glob("*.py"))) == [["pkg.a", "pkg.b"]]

"""Every arrow points down: tiling_model (the ground floor) imports and includes nothing of ours,
model_tools (its command line, calibration, plots, explanations) and kernel use only tiling_model, tuner
all three, service tiling_model, model_tools and one module of kernel (``kernel.sources``: were
the tables tuned for these kernel sources?), never the tuner (it reads the tables the tuner wrote).
Read from the sources (Python imports by ``ast``, C++ ``#include "..."`` lines), so a new arrow back up
fails here before anyone imports it."""

from __future__ import annotations

import ast
import re
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

"""Every module of ours is proved by a test: imported by one (a unit test, named after the module where it
has one), or, where the level that proves it is the whole program (a route over real HTTP, a command run
as users run it, an operator called through ``torch.ops``), named below with the test that drives it and
a phrase that test must contain. A new module without either fails here; so does an entry whose module
is gone or whose test no longer says what it drives."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tiling_model", "model_tools", "kernel", "tuner", "service")

#: module -> (the test that drives it end to end, a phrase that test contains)
END_TO_END = {
    "service.http": ("tests/service/test_http_protocol.py", "HEAD %s HTTP/1.1"),
    "service.bodies": ("tests/service/test_service.py", "json_invalid"),
    "service.deps": ("tests/service/test_service.py", '"/tiling"'),
    "service.methods": ("tests/service/test_http_protocol.py", "HEAD"),
    "service.routes": ("tests/service/test_service.py", "/tiling/batch"),
    "service.routes.tiling": ("tests/service/test_service.py", "/tiling/batch"),
    "service.routes.health": ("tests/service/test_service.py", '"/readyz"'),
    "service.routes.metrics": ("tests/service/test_service.py", '"/metrics"'),
    "service.routes.tables": ("tests/service/test_service.py", '"/tables"'),
    "service.routes.explorer": ("tests/service/test_explorer.py", '"/explorer"'),
    "model_tools.cli.tiling_cmd": ("tests/model_tools/test_cli.py", '"tiling"'),
    "model_tools.cli.model_cmds": ("tests/model_tools/test_calibrate.py", '"plot"'),
    "model_tools.plot": ("tests/model_tools/test_calibrate.py", '"plot"'),
    "kernel.torch_op.op": ("tests/kernel/test_torch_op.py", "torch.ops.bcetune"),
    "kernel.torch_op.calls": ("tests/kernel/test_torch_op.py", "test_op_refuses_bad_arguments_naming_them"),
    "kernel.torch_op.fallback": ("tests/kernel/test_torch_op.py", "FallbackWarning"),
    "kernel.torch_op.tilings": ("tests/kernel/test_torch_op.py", "test_the_cache_is_bounded"),
}


def our_modules() -> set[str]:
    found = set()
    for package in PACKAGES:
        for f in (ROOT / package).rglob("*.py"):
            if f.name == "__main__.py":
                continue
            parts = f.relative_to(ROOT).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def imported_by_tests() -> set[str]:
    """Modules the tests import (``from a.b import c`` counts a.b and a.b.c; a module counts its packages)."""
    found: set[str] = set()
    for f in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found | {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 1)}


def test_every_module_is_imported_by_a_test_or_driven_end_to_end() -> None:
    untested = our_modules() - imported_by_tests() - set(END_TO_END)
    assert not untested, f"modules no test imports or drives (add a test, or an END_TO_END entry): {sorted(untested)}"


@pytest.mark.parametrize("module", sorted(END_TO_END))
def test_each_end_to_end_entry_names_a_module_and_a_test_that_drives_it(module: str) -> None:
    test, phrase = END_TO_END[module]
    assert module in our_modules(), f"{module} is gone: drop its entry"
    assert phrase in (ROOT / test).read_text(), f"{test} no longer contains {phrase!r}"


def test_the_import_reader_counts_packages_and_from_imports() -> None:
    assert {"service.logs", "service", "tiling_model.confidence"} <= imported_by_tests()
    assert "service.routes.explorer" not in imported_by_tests()  # drive by HTTP only: must be listed

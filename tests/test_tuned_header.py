"""The exported C++ table header: current with the shipped tables, and its lookup equals Python's."""

from __future__ import annotations

import subprocess
from dataclasses import astuple
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_cpp_driver

from service.config import SHIPPED_TABLES
from tiling_model import TilingParams, Variant, compute_tiling, load_soc
from tiling_model.dtypes import DTYPE_ID, REDUCTION_ID
from tiling_model.tables import load_table
from tiling_model.variant import POS_WEIGHT_FORMS, WRT_FORMS
from tuner.export_header import HEADER_PATH, render

ROOT = Path(__file__).resolve().parents[1]
TABLES = [load_table(p) for p in sorted(SHIPPED_TABLES.glob("*.json"))]


def test_committed_header_is_current() -> None:
    assert HEADER_PATH.read_text() == render(TABLES), "run `python -m tuner export-header` after a sweep"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_cpp_driver("tuned_lookup_driver.cpp", tmp_path_factory.mktemp("lookup"))


def test_cpp_lookup_and_tiling_equal_python_for_every_entry_and_random_sizes(driver: Path) -> None:
    rng = np.random.default_rng(11)
    queries = []
    for table in TABLES:
        keys = {astuple(e.variant) for e in table.entries}
        for e in table.entries:
            queries.append((table, astuple(e.variant), e.size))
        for key in keys:
            for n in rng.integers(1, 4 * 10**9, 25):
                queries.append((table, key, int(n)))
            for n in (0, 1, 2, 3, 2047, 2048, 2049):
                queries.append((table, key, n))
        queries.append((table, ("float32", "none", True, "full", "logit"), 12345))  # untuned variant: defaults
    lines = []
    for table, (dtype, red, weight, pw, wrt), n in queries:
        soc = load_soc(table.soc)
        lines.append(
            f"{table.soc} {DTYPE_ID[dtype]} {REDUCTION_ID[red]} {int(weight)} {POS_WEIGHT_FORMS.index(pw)} "
            f"{WRT_FORMS.index(wrt)} {n} {soc.ub_bytes} {soc.ub_reserve_bytes} {soc.aiv_cores}"
        )
    out = subprocess.run(
        [str(driver)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(out) == len(queries)
    hits = 0
    for (table, (dtype, red, weight, pw, wrt), n), got in zip(queries, out, strict=True):
        e = table.lookup(Variant(dtype, red, weight, pw, wrt), n)
        params = TilingParams(**e.params) if e else TilingParams()
        t = compute_tiling([n], Variant(dtype, red, weight, pw, wrt), params, table.soc)
        head = (f"hit {e.size} " + " ".join(str(v) for v in e.params.values())) if e else "miss"
        want = head + " " + " ".join(str(v) for v in [*t.fields.__dict__.values(), t.block_dim])
        assert got == want, (table.soc, dtype, red, weight, pw, wrt, n)
        hits += e is not None
    assert hits > 0.9 * len(queries)


def test_export_header_cli_writes_and_refuses_an_empty_directory(tmp_path: Path) -> None:
    import sys

    out = tmp_path / "t.h"
    r = subprocess.run(
        [sys.executable, "-m", "tuner", "export-header", "--tables", str(SHIPPED_TABLES), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and out.read_text() == HEADER_PATH.read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run(
        [sys.executable, "-m", "tuner", "export-header", "--tables", str(empty), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "no tables in" in r.stderr

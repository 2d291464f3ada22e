"""What the CANN build ships tiles every call as the service answers it.

The generated header (``kernel/op_host/bce_grad_tuned_table.h``) is current with the shipped tables,
its indexed lookup finds the tables' buckets, and the C++ unseen-size policy (``TunedKnobs``: the
bucket's BUFFER_NUM, block size, core count and tile re-fit by the C++ port of the cost model; a device
table's every BUFFER_NUM: tests/tuner/test_residual_on_a_sweep.py)
chooses the same knobs and the same tiling struct as ``POST /tiling`` on thousands of random sizes
and variants per SoC.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import astuple, replace
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_cpp_driver

from kernel.host_tiling import HostKnobs, build_host_tiling, query_host_tiling
from service.answers import CachedAnswers, Query
from service.config import SHIPPED_TABLES
from tiling_model import BadRequest, BuildError, TilingParams, Variant, compute_tiling, load_soc
from tiling_model.model_types import (
    BOUND_SLACK,
    GM_ALIGN_BYTES,
    PERIOD,
    PRUNE_MARGIN_US,
    PRUNE_RELATIVE,
    REPEAT_BYTES,
    WARMUP,
)
from tiling_model.space import TILE_STEP_BYTES
from tiling_model.tables import TuningTable, load_table
from tuner.export_header import HEADER_PATH, render

ROOT = Path(__file__).resolve().parents[2]
TABLES = {t.soc: t for t in (load_table(p) for p in sorted(SHIPPED_TABLES.glob("*.json")))}
PER_SOC = 1500 if os.environ.get("CI") else 400  # random (variant, size) calls per SoC in the parity test


def test_committed_header_is_current() -> None:
    assert HEADER_PATH.read_text() == render(list(TABLES.values())), "run `python -m tuner export-header` after a sweep"


def test_cpp_cost_model_constants_are_the_python_ones() -> None:
    text = (ROOT / "tiling_model" / "include" / "bce_grad_cost_model.h").read_text()

    def const(name: str) -> float:
        m = re.search(rf"constexpr (?:int64_t|double) {name} = ([0-9.e+-]+);", text)
        assert m, f"{name} not found in bce_grad_cost_model.h"
        return float(m.group(1))

    assert const("kWarmup") == WARMUP
    assert const("kPeriod") == PERIOD
    assert const("kRepeatBytes") == REPEAT_BYTES
    assert const("kGmAlignBytes") == GM_ALIGN_BYTES
    assert const("kTileStepBytes") == TILE_STEP_BYTES
    assert const("kBoundSlack") == BOUND_SLACK
    assert const("kPruneMarginUs") == PRUNE_MARGIN_US
    assert const("kPruneRelative") == PRUNE_RELATIVE


@pytest.fixture(scope="module")
def exe() -> Path:
    try:
        return build_host_tiling()
    except BuildError as e:
        if shutil.which("g++") is None:
            pytest.skip(str(e))
        raise


@pytest.fixture(scope="module")
def resolver() -> CachedAnswers:
    return CachedAnswers(TABLES)


def _service(resolver: CachedAnswers, soc: str, v: Variant, n: int, period: int = 0) -> dict:
    """The service's answer; where it refuses a launch past the device's memory (the build has no such
    check), the answer it would have given, which the build must equal, and the refusal checked."""
    q = Query(soc, (n,), v, (), period)
    try:
        return resolver.resolve(q)
    except BadRequest as e:
        assert "of device memory" in str(e), e
        r = resolver.resolver.resolve_unchecked(q)
        assert r.tiling.device_bytes > r.profile.memory_bytes, e
        t = r.tiling
        return {"params": t.params.as_dict(), "tiling": t.field_dict(), "block_dim": t.block_dim, "source": r.source,
                "weight_period": t.fields.weightPeriod}  # fmt: skip


def _variants(table: TuningTable) -> list[Variant]:
    """The tuned variants (weight full and none) of both kernel modes: BceGrad's and BceWithLogitsFused's."""
    variants = sorted({e.variant for e in table.entries}, key=astuple)
    assert {v.mode for v in variants} == {"grad", "fused"}, table.soc
    return variants


def _assert_same(got: HostKnobs, doc: dict, where: str) -> None:
    assert got.params.as_dict() == doc["params"], where
    assert got.fields == tuple(doc["tiling"].values()), where
    assert got.block_dim == doc["block_dim"], where


def test_build_tiles_every_call_as_the_service_answers(exe: Path, resolver: CachedAnswers) -> None:
    """Random variants at log-uniform sizes (1 to 4x the largest tuned size) and at every bucket's edges:
    the same knobs, struct and block dim as the service's answer; most calls are re-fits."""
    rng = np.random.default_rng(2026_11_30)
    calls: list[tuple[str, Variant, int]] = []
    for soc, table in TABLES.items():
        variants = _variants(table)
        top = max(e.size for e in table.entries) * 4
        for _ in range(PER_SOC):
            v = variants[rng.integers(len(variants))]
            calls.append((soc, v, int(np.exp(rng.uniform(0, np.log(top))))))
        for e, limit in table.bucket_limits():
            for n in {e.size, e.size - 1, e.size + 1} | ({limit - 1, limit} if limit else set()):
                calls.append((soc, e.variant, n))
    answers = query_host_tiling(calls, exe)
    refits = changed = 0
    for (soc, v, n), got in zip(calls, answers, strict=True):
        doc = _service(resolver, soc, v, n)
        where = f"{soc} {v.label()} n={n}"
        _assert_same(got, doc, where)
        entry = TABLES[soc].lookup(v, n)
        assert entry is not None and got.entry_size == entry.size, where
        assert got.refitted == (entry.size != n and doc["source"] == "bucket"), where
        refits += got.refitted
        changed += got.params.as_dict() != entry.params
    assert refits > 0.6 * len(calls), f"only {refits} of {len(calls)} calls were re-fits"
    assert changed > 0.3 * len(calls), f"the re-fit changed the bucket's knobs in only {changed} calls"


def test_broadcast_weight_forms_are_tiled_as_the_service_answers(exe: Path, resolver: CachedAnswers) -> None:
    """The untuned weight forms (last_dim, rows, scalar) are the full weight's buckets re-fitted with their
    own kernel, in the build as in the service: the same knobs, struct (its weightPeriod too) and block
    dim, at random sizes and periods (rows from 1 element per value to one row)."""
    rng = np.random.default_rng(2026_12_01)
    calls: list[tuple[str, Variant, int, int]] = []
    for soc, table in TABLES.items():
        full = [v for v in _variants(table) if v.weight == "full"]
        top = max(e.size for e in table.entries) * 4
        for _ in range(PER_SOC // 5):
            base = full[rng.integers(len(full))]
            form = ("last_dim", "rows", "scalar")[rng.integers(3)]
            n = int(np.exp(rng.uniform(0, np.log(top))))
            period = int(np.gcd(n, int(rng.choice([1, 2, 3, 96, 1000, 4096, n])))) if form != "scalar" else 0
            calls.append((soc, replace(base, weight=form), n, period))
    answers = query_host_tiling(calls, exe)
    for (soc, v, n, period), got in zip(calls, answers, strict=True):
        doc = _service(resolver, soc, v, n, period)
        where = f"{soc} {v.label()} n={n} period={period}"
        _assert_same(got, doc, where)
        entry = TABLES[soc].lookup(v.tuned_base, n)
        assert entry is not None and got.entry_size == entry.size, where
        assert doc["source"] == "bucket" and got.refitted, where
        assert doc["weight_period"] == (period if v.weight != "scalar" else 0), where


def test_an_untuned_soc_gets_the_defaults_and_an_empty_tensor_no_launch(exe: Path) -> None:
    v = _variants(TABLES["Ascend910B2"])[0]
    [empty] = query_host_tiling([("Ascend910B2", v, 0)], exe)
    assert empty.entry_size is None and empty.block_dim == 0 and not empty.refitted
    soc = load_soc("Ascend910B2")  # a SoC the tables do not know, on 910B2's platform numbers
    line = f"Ascend9999 0 0 1 0 0 0 4096 0 {soc.ub_bytes} {soc.ub_reserve_bytes} {soc.aiv_cores}\n"
    out = subprocess.run([str(exe)], input=line, capture_output=True, text=True, check=True).stdout.split()
    want = compute_tiling([4096], Variant("float32", "none", True), TilingParams(), "Ascend910B2")
    assert out[:6] == ["miss", "0", "0", "0", "0", "table"]
    assert [int(w) for w in out[6:]] == [*want.field_dict().values(), want.block_dim]


def test_the_refit_picks_what_every_configuration_predicted_picks(tmp_path: Path) -> None:
    """The re-fit is a branch and bound: its pick and least prediction are those of the whole slice predicted
    one configuration at a time, over random sizes, variants, block subsets, buffer counts, core caps, tile
    tops, seeds and knob corrections, and bounded by its own best (tests/kernel/cpp/refit_exhaustive.cpp)."""
    exe = compile_cpp_driver("refit_exhaustive.cpp", tmp_path)
    r = subprocess.run([str(exe), "250", "20261307"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:]
    assert r.stdout.strip().endswith("250 cases, 0 disagreements")


def test_the_refits_range_floors_stay_under_the_pipeline_at_every_tile(tmp_path: Path) -> None:
    """What lets the re-fit drop a range unseen: CoreLines::RangeUs and TradeUs at or under the simulated
    pipeline at every tile of the range, over random kernels, SoCs, core counts, buffer counts, widths and
    ranges (tests/kernel/cpp/refit_floors.cpp; a floor 1% too high, or a chain one copy too long, fails it)."""
    exe = compile_cpp_driver("refit_floors.cpp", tmp_path)
    r = subprocess.run([str(exe), "20000", "20261207"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:]
    assert r.stdout.strip().endswith("0 above the pipeline")


def test_microbenchmark_builds_and_reports_every_kind_of_call(tmp_path: Path) -> None:
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ not installed")
    exe = tmp_path / "bench"
    src = ROOT / "benchmarks" / "cpp" / "tuned_tiling_bench.cpp"
    subprocess.run([cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-I",
                    str(ROOT / "kernel" / "op_host"), "-I", str(ROOT / "tiling_model" / "include"), str(src), "-o",
                    str(exe)], check=True)  # fmt: skip
    out = subprocess.run([str(exe), "40", "1"], capture_output=True, text=True, check=True).stdout
    kinds = [line.split("  ")[0].strip() for line in out.splitlines()]
    assert len(kinds) == 4 and all("median" in line and "ns" in line for line in out.splitlines()), out
    r = subprocess.run([str(exe), "0"], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "usage" in r.stderr


def test_export_header_cli_writes_and_refuses_an_empty_directory(tmp_path: Path) -> None:
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


def test_bench_regret_reports_the_build_beside_the_service() -> None:
    """`make bench-regret` on a few sizes: a row per policy, and the build's row is the service's."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bucket_regret.py"), "--soc", "Ascend910B2", "--sizes", "5"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = {line.split()[1]: line.split()[2:5] for line in r.stdout.splitlines() if line.startswith("Ascend910B2")}
    assert set(rows) == {"service", "build", "nearest"} and rows["service"] == rows["build"]
    fused = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bucket_regret.py"), "--soc", "Ascend910B2", "--sizes", "5",
         "--mode", "fused"], capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert fused.returncode == 0, fused.stderr
    rows = {line.split()[1]: line.split()[2:5] for line in fused.stdout.splitlines() if line.startswith("Ascend910B2")}
    assert set(rows) == {"service/fused", "build/fused", "nearest/fused"}
    assert rows["service/fused"] == rows["build/fused"]
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bucket_regret.py"), "--sizes", "0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "--sizes must be at least 1" in bad.stderr

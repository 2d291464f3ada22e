"""Broadcast weight forms: the shape mapping is PyTorch's broadcasting, and the model's traffic and UB plan
for each form differ from the full weight's by exactly what the kernel reads and allocates."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiling_model import TilingParams, Variant, compute_tiling, predict_detail
from tiling_model.dtypes import DTYPE_BYTES
from tiling_model.errors import BadRequest
from tiling_model.kernels import LAST_DIM_STAGE_ELEMS, bce_grad_kernel
from tiling_model.variant import broadcast_of, operand_shape, pos_weight_of


@st.composite
def broadcastable(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """An input shape and an operand shape: each aligned dim kept or 1, some leading dims dropped or
    1-padded, now and then a dim that does not broadcast."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=5)))
    w = [d if draw(st.booleans()) else 1 for d in shape[draw(st.integers(0, len(shape))) :]]
    w = [1] * draw(st.integers(0, 1)) + w
    if w and draw(st.integers(0, 9)) == 0:
        w[-1] += 1
    return shape, tuple(w)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch (the reference) is not installed")
@settings(max_examples=400, deadline=None)
@given(broadcastable())
def test_a_form_reads_what_pytorch_broadcasting_gives(case: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    """Element k of the input reads w[k] (full), w[k % P] (last_dim), w[k // R] (rows), w[0] (scalar):
    the value PyTorch's broadcasting puts there; and what it refuses is refused."""
    import torch  # the reference; the ground floor's other tests run without it

    shape, w_shape = case
    w = torch.arange(1, math.prod(w_shape) + 1, dtype=torch.float64).reshape(w_shape)
    try:  # what `loss * weight` makes of it; a weight that grows the result is not one for this input
        out = torch.zeros(shape, dtype=torch.float64) + w
        assert out.numel() == math.prod(shape)
        want = out.reshape(-1).numpy()
    except (RuntimeError, AssertionError):
        with pytest.raises(BadRequest):
            broadcast_of("weight", w_shape, shape)
        return
    try:
        b = broadcast_of("weight", w_shape, shape)
    except BadRequest as e:
        assert "materialise this one" in str(e)  # a shape torch takes that no form reads: [A, 1, C]
        return
    flat, k = w.reshape(-1).numpy(), np.arange(math.prod(shape))
    got = {
        "full": lambda: flat[k],
        "last_dim": lambda: flat[k % max(b.period, 1)],
        "rows": lambda: flat[k // max(b.period, 1)],
        "scalar": lambda: np.full(k.shape, flat[0]),
    }[b.form]()
    assert np.array_equal(got, want), (shape, w_shape, b)
    small = operand_shape(b.form, shape, b.period)
    if small is not None and k.size:
        assert broadcast_of("weight", small, shape) == b  # the form's smallest shape maps back


def test_pos_weight_takes_the_full_and_last_dim_forms_only() -> None:
    assert pos_weight_of((5,), (4, 5)).form == "last_dim" and pos_weight_of((4, 5), (4, 5)).form == "full"
    assert pos_weight_of((1,), (3, 1)).period == 1  # one value and C = 1: the [C] row
    for bad in ((4, 1), (1,)):
        with pytest.raises(BadRequest, match="the kernel reads pos_weight of the input's shape or \\[C\\]"):
            pos_weight_of(bad, (4, 5))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int16"])
@pytest.mark.parametrize("shape", [(4096, 1000), (37, 129), (3000, 2), (1, 1)])
def test_traffic_of_each_form_is_the_full_forms_less_what_it_does_not_read(dtype: str, shape: tuple[int, int]) -> None:
    """At the same knobs: last_dim saves the n elements of the stream and reads a staging row per core;
    rows reads ceil(n / R) values; scalar one value per launch; none nothing."""
    n, elem = math.prod(shape), DTYPE_BYTES[dtype]
    params = TilingParams(512, 1, 2048, 40)
    moved = {}
    for form in ("full", "last_dim", "rows", "scalar", "none"):
        t = compute_tiling(list(shape), Variant(dtype, "none", form), params, "Ascend910B2")
        moved[form] = predict_detail(t).bytes_moved
        block_dim = t.block_dim
    assert moved["full"] - moved["none"] == n * elem
    assert moved["full"] - moved["last_dim"] == n * elem - block_dim * LAST_DIM_STAGE_ELEMS * elem
    assert moved["full"] - moved["rows"] == n * elem - math.ceil(n / shape[-1]) * elem
    assert moved["full"] - moved["scalar"] == n * elem - elem


def test_ub_plan_of_each_form() -> None:
    """rows adds one compute-type TBuf of a tile to the full form's plan; last_dim one staging buffer;
    scalar and none drop the weight queue."""
    tile, bn = 8192, 2
    plan = {f: bce_grad_kernel(Variant("float16", "none", f), "exact", 1, 7).ub_bytes(tile, bn)
            for f in ("full", "last_dim", "rows", "scalar", "none")}  # fmt: skip
    assert plan["rows"] - plan["full"] == tile // 2 * 4  # the expanded values in float32
    assert plan["last_dim"] - plan["full"] == LAST_DIM_STAGE_ELEMS * 2
    assert plan["full"] - plan["scalar"] == plan["full"] - plan["none"] == bn * tile


def test_a_rows_weight_costs_one_duplicate_per_row() -> None:
    """The vector time grows as rows shrink (one Duplicate each), the HBM traffic falls: short rows are
    compute-bound, long rows nearly the no-weight kernel."""
    us = {}
    for r in (1, 2, 8, 1000):
        t = compute_tiling([4096, 1000], Variant("float32", "none", "rows"), None, "Ascend910B2", "exact", r)
        us[r] = predict_detail(t).busy_us["vector"]
    assert us[1] > us[2] > us[8] > us[1000]
    with pytest.raises(BadRequest, match="period 7 must be >= 1 and divide"):
        compute_tiling([4096, 1000], Variant("float32", "none", "rows"), None, "Ascend910B2", "exact", 7)


def test_the_weight_forms_benchmark_prints_a_row_per_form() -> None:
    """`make bench-weight-forms` smoke test: every shape x form row, each form faster than full + copy."""
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "weight_forms.py"), "--dtypes", "float16"],
        capture_output=True, text=True, timeout=300, check=True, cwd=root,
    )  # fmt: skip
    rows = [line.split("|")[1:-1] for line in r.stdout.splitlines() if line.startswith("| [")]
    assert len(rows) == 4 * 3 and {row[2].split()[0] for row in rows} == {"last_dim", "rows", "scalar"}
    for row in rows:
        full_copy, form = float(row[4]), float(row[5])
        assert form < full_copy and float(row[8]) > 0, row

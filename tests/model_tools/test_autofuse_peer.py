"""CANN's auto-tiling cost model as re-implemented: its pieces computed by hand on small tilings."""

from __future__ import annotations

import pytest

from model_tools import autofuse_peer as peer
from tiling_model import TilingParams, load_soc
from tiling_model.cost import engine_kinds
from tiling_model.kernels import elementwise_kernel
from tiling_model.tiling import tile_kernel

SOC = load_soc("Ascend910B2")


def test_one_tile_per_core_by_hand() -> None:
    """4096 float32 elements, two inputs, add then exp: 32 cores of one 128-element tile (512 B)."""
    t = tile_kernel(elementwise_kernel("float32", 2, 1, ["add", "exp"]), [4096], TilingParams(), SOC)
    k = engine_kinds(t)
    assert (t.block_dim, max(k.elems), max(k.tiles)) == (32, 128, 1)
    load = 512 / (9.9074 + 15.896 / 32) + 27.01  # 76.22 cycles
    store = 512 / (9.96 + 3.79 / 32) + 12.09  # 62.89
    mte2 = 2 * load + 15.89 * 32 + 882.09  # a load under 25,000 bytes: the small head
    vector = (0.0206 * 128 + 23.2225) + (0.0307 * 128 + 28.0376) + 37.37
    mte3 = store + 497.36
    got = peer.pipe_cycles(t)
    assert got["mte2"] == pytest.approx(mte2, rel=1e-12)
    assert got["vector"] == pytest.approx(vector, rel=1e-12)
    assert got["mte3"] == pytest.approx(mte3, rel=1e-12)
    assert peer.predict_us(t, SOC) == pytest.approx((mte2 + 300 * 32) / 1800, rel=1e-12)


def test_full_tiles_and_tail_and_the_large_head() -> None:
    """1,000,000 float32 elements: the slowest kind's full tiles and its tail each pay their own
    fixed costs; a load of 25,000 bytes or more takes the large MTE2 head."""
    t = tile_kernel(elementwise_kernel("float32", 1, 1, ["muls"]), [1_000_000], TilingParams(), SOC)
    k = engine_kinds(t)
    tile, bd = t.fields.tileDataNum, t.block_dim
    assert tile * 4 >= 25_000 and max(k.tiles) > 1
    per_kind = []
    for count, tiles, tail in zip(k.counts, k.tiles, k.tail, strict=True):
        if count:
            load = (tiles - 1) * (tile * 4 / (9.9074 + 15.896 / bd) + 27.01) + tail * 4 / (9.9074 + 15.896 / bd) + 27.01
            per_kind.append(load)
    assert peer.pipe_cycles(t)["mte2"] == pytest.approx(max(per_kind) + 32.72 * bd + 1575.03, rel=1e-12)


def test_half_types_pay_their_casts() -> None:
    """float16 computes in float32: a cast up per input and one down per output, at ATT's Cast rows."""
    n = 48 * 1024
    t16 = tile_kernel(elementwise_kernel("float16", 1, 1, ["adds"]), [n], TilingParams(), SOC)
    e = max(engine_kinds(t16).elems)
    cast_up, cast_down = 0.0147 * e + 20.1204, 0.0087 * e + 20.4393
    adds32 = 0.0141 * e + 22.0936
    assert peer.pipe_cycles(t16)["vector"] == pytest.approx(cast_up + adds32 + cast_down + 37.37, rel=1e-12)


def test_every_vector_op_of_ours_has_a_price() -> None:
    from tiling_model.kernels import VECTOR_OPS

    assert set(VECTOR_OPS) <= set(peer.VECTOR_KB)


def test_an_empty_launch_costs_nothing() -> None:
    t = tile_kernel(elementwise_kernel("float32", 1, 1, ["adds"]), [0], TilingParams(), SOC)
    assert peer.predict_us(t, SOC) == 0.0

"""Property tests of the host tiling arithmetic over n from 1 to 10^10."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tiling_model import (
    TilingParams,
    Variant,
    compute_tiling,
    core_plan,
    known_socs,
    load_soc,
    valid_combinations,
    validate,
)
from tiling_model.dtypes import DTYPE_BYTES
from tiling_model.kernels import bce_grad_kernel

N = st.integers(min_value=1, max_value=10**10)
COMBO = st.sampled_from(valid_combinations())
SOC = st.sampled_from(known_socs())


@st.composite
def valid_case(draw: st.DrawFn) -> tuple:
    n = draw(N)
    dtype, reduction = draw(COMBO)
    weight = draw(st.booleans())
    soc = load_soc(draw(SOC))
    kernel = bce_grad_kernel(Variant(dtype, reduction, weight))
    bn = draw(st.sampled_from(kernel.allowed_buffer_nums()))
    top = kernel.max_tile_bytes(soc.ub_usable_bytes, bn)
    tile = draw(st.integers(min_value=1, max_value=top // 32)) * 32
    block = draw(st.integers(min_value=1, max_value=1024)) * 32
    cores = draw(st.integers(min_value=1, max_value=soc.aiv_cores))
    return n, dtype, reduction, weight, soc, TilingParams(block, bn, tile, cores)


@given(valid_case())
def test_exact_scheme_validates_clean(case: tuple) -> None:
    n, dtype, reduction, weight, soc, params = case
    t = compute_tiling([n], Variant(dtype, reduction, weight), params, soc)
    assert validate(t, soc) == []


@given(valid_case())
def test_exact_scheme_partitions_every_element_once(case: tuple) -> None:
    n, dtype, reduction, weight, soc, params = case
    t = compute_tiling([n], Variant(dtype, reduction, weight), params, soc)
    plans = core_plan(t)
    assert 1 <= t.block_dim <= params.core_num
    assert plans[0].start == 0
    for a, b in zip(plans, plans[1:], strict=False):
        assert a.end == b.start
    assert plans[-1].end == n
    for c in plans:
        assert c.count >= 1
        assert (c.tiles - 1) * c.tile_elems + c.tail_elems == c.count
        assert 1 <= c.tail_elems <= c.tile_elems
    # Big and small cores keep the seed's structure: they differ by exactly one block.
    block_elems = params.block_bytes // DTYPE_BYTES[dtype]
    assert t.fields.bigCoreDataNum - t.fields.smallCoreDataNum == block_elems


@given(st.integers(min_value=1, max_value=10**10), COMBO)
def test_seed_out_of_bounds_is_the_rounding_to_512_bytes(n: int, combo: tuple[str, str]) -> None:
    dtype, reduction = combo
    t = compute_tiling([n], Variant(dtype, reduction), scheme="seed")
    elem = DTYPE_BYTES[dtype]
    rounded = -(-n * elem // 512) * 512 // elem
    oob = [v for v in validate(t) if v.kind == "out_of_bounds"]
    if (n * elem) % 512 == 0:
        assert oob == []
    else:
        assert len(oob) == 1 and oob[0].count == rounded - n


@given(st.lists(st.integers(min_value=0, max_value=64), min_size=0, max_size=8), COMBO)
def test_any_shape_gives_a_valid_tiling_including_empty(shape: list[int], combo: tuple[str, str]) -> None:
    dtype, reduction = combo
    t = compute_tiling(shape, Variant(dtype, reduction))
    assert validate(t) == []
    assert len(t.to_bytes()) == 8 * 17
    if 0 in shape:
        assert t.n == 0 and t.block_dim == 0

"""The fast paths of the cost model give the slow paths' answers: the bounds bound, the pruned scoring
picks and ranks as the full one, and a single tiling's scalar pipeline equals the vectorised one to
the bit."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tiling_model.simulate as sim
from tiling_model import TilingParams, Variant, compute_tiling, load_soc, predict_detail
from tiling_model.kernels import ElementwiseKernel, bce_grad_kernel
from tiling_model.space import BLOCK_CHOICES, enumerate_space, score_space
from tiling_model.tiling import TilingError
from tiling_model.variant import WEIGHT_FORMS

SOCS = ["Ascend910B2", "Ascend910B4", "Ascend310B1"]
variants = st.builds(
    Variant,
    st.sampled_from(["float16", "float32", "bfloat16"]),
    st.sampled_from(["none", "sum", "mean"]),
    st.sampled_from(WEIGHT_FORMS),
    st.sampled_from(["none", "full", "last_dim"]),
)


def period(v: Variant, n: int) -> int:
    """A last-dim or rows weight's period for n elements: a divisor of n, small or large by turns."""
    if v.weight not in ("last_dim", "rows"):
        return 0
    p = math.gcd(max(n, 1), 96)
    return p if n % 3 else max(n, 1) // p


def kernel(v: Variant, n: int) -> ElementwiseKernel:
    return bce_grad_kernel(v, "exact", 1, period(v, n))


sizes = st.one_of(st.integers(1, 5000), st.integers(1, 10**6), st.integers(1, 10**10))


@settings(max_examples=80, deadline=None)
@given(variants, sizes, st.sampled_from(SOCS))
def test_bounds_bound_and_certain_rows_are_exact(v: Variant, n: int, soc_name: str) -> None:
    soc, k = load_soc(soc_name), kernel(v, n)
    block, bn, tile, cores = enumerate_space(k, soc, n)
    kinds = sim.kinds_exact(n, k.elem_bytes, block, bn, tile, cores)
    predicted = sim.simulate(k, kinds, soc, np.full(block.shape, n)).predicted_us
    lower, certain = sim.bounds_us(k, kinds, soc, np.full(block.shape, n))
    assert (lower <= predicted * (1 + 1e-12) + 1e-8).all()  # float rounding only (seen: 5e-9 us, 1e-15 relative)
    assert (lower[certain] == predicted[certain]).all()


@settings(max_examples=80, deadline=None)
@given(variants, sizes, st.sampled_from(SOCS), st.sampled_from(BLOCK_CHOICES), st.booleans(), st.integers(1, 16))
def test_pruned_scoring_picks_and_ranks_like_the_full_space(
    v: Variant, n: int, soc_name: str, block: int, whole_space: bool, top: int
) -> None:
    soc, k = load_soc(soc_name), kernel(v, n)
    blocks, buffers = (None, None) if whole_space else ((block,), (k.allowed_buffer_nums()[-1],))
    full = score_space(k, soc, n, blocks_only=blocks, buffers_only=buffers)
    pruned = score_space(k, soc, n, blocks_only=blocks, buffers_only=buffers, top=top)
    assert pruned.params(pruned.best_index()) == full.params(full.best_index())
    assert [pruned.params(i) for i in pruned.ranked(top)] == [full.params(i) for i in full.ranked(top)]
    assert len(pruned) <= len(full)


@settings(max_examples=200, deadline=None)
@given(
    variants,
    st.integers(0, 10**10),
    st.sampled_from(SOCS),
    st.sampled_from([32, 512, 4096]),
    st.sampled_from([1, 2]),
    st.sampled_from([512, 1024, 4096, 8192]),
    st.integers(1, 48),
)
def test_the_scalar_pipeline_is_the_vectorised_one_to_the_bit(
    v: Variant, n: int, soc: str, block: int, bn: int, tile: int, cores: int
) -> None:
    try:
        t = compute_tiling([n], v, TilingParams(block, bn, tile, cores), soc, "exact", period(v, n) or None)
    except TilingError:
        return
    scalar = predict_detail(t)
    saved = sim.SCALAR_ROWS
    try:
        sim.SCALAR_ROWS = -1
        vectorised = predict_detail(t)
    finally:
        sim.SCALAR_ROWS = saved
    assert scalar == vectorised

"""The compiled hot paths (tiling_model.compiled, numba) are the NumPy model: the same prediction to
the bit for one tiling, the same pick for a re-fit and for the model's best over the whole space."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_model_bounds import SOCS, kernel, period, sizes, variants

from tiling_model import TilingParams, Variant, compute_tiling, load_soc
from tiling_model import compiled as C
from tiling_model.cost import kinds_of, predict_detail
from tiling_model.search import model_best
from tiling_model.simulate import SteadyL2, simulate
from tiling_model.space import BLOCK_CHOICES, score_space, tile_choices
from tiling_model.tiling import TilingError
from tiling_model.validate import validate

C.warm_up()  # the compiled paths on from here: predict_detail and model_best use them (the tests below check)
assert C.ready()


@settings(max_examples=300, deadline=None)
@given(
    variants,
    st.integers(0, 10**11),
    st.sampled_from(SOCS),
    st.sampled_from([32, 512, 4096]),
    st.sampled_from([1, 2]),
    st.sampled_from([512, 1024, 4096, 8192]),
    st.integers(1, 48),
    st.sampled_from([False, True, SteadyL2(64 * 2**20, 2.0, 192 * 2**20), "steady"]),
)
def test_one_prediction_is_the_vectorised_simulator_to_the_bit(
    v: Variant, n: int, soc_name: str, block: int, bn: int, tile: int, cores: int, l2: object
) -> None:
    soc = load_soc(soc_name)
    try:
        t = compute_tiling([n], v, TilingParams(block, bn, tile, cores), soc, "exact", period(v, n) or None)
    except TilingError:
        return
    fast = predict_detail(t, soc, l2)  # type: ignore[arg-type]
    r = simulate(t.kernel, kinds_of(t), soc, np.array([t.n]), l2)  # type: ignore[arg-type]
    assert fast.predicted_us == r.predicted_us[0] and fast.roofline_us == r.roofline_us[0]
    assert fast.core_us == r.core_us[0] and fast.bandwidth_us == r.bandwidth_us[0]
    assert list(fast.busy_us.values()) == list(r.busy_us[0])


@settings(max_examples=150, deadline=None)
@given(
    variants, sizes, st.sampled_from(SOCS), st.lists(st.sampled_from(BLOCK_CHOICES), min_size=1, unique=True), st.data()
)
def test_the_compiled_refit_picks_what_scoring_the_blocks_picks(
    v: Variant, n: int, soc_name: str, blocks: list[int], data: st.DataObject
) -> None:
    soc, k = load_soc(soc_name), kernel(v, n)
    bn = data.draw(st.sampled_from(k.allowed_buffer_nums()))
    full = score_space(k, soc, n, blocks_only=tuple(blocks), buffers_only=(bn,))
    want = full.params(full.best_index())
    seed = data.draw(
        st.none() | st.tuples(st.sampled_from(blocks), st.sampled_from([512, 4096, 8192]), st.integers(1, 48))
    )
    block, tile, cores, us = C.refit_choice(k, soc, n, tuple(blocks), bn, tile_choices(k, soc, bn), seed)
    assert (block, tile, cores) == (want.block_bytes, want.tile_bytes, want.core_num)
    assert us == full.result.predicted_us.min()


@settings(max_examples=25, deadline=None)
@given(variants, sizes, st.sampled_from(SOCS))
def test_the_models_best_is_the_whole_spaces_best_valid(v: Variant, n: int, soc_name: str) -> None:
    soc, k = load_soc(soc_name), kernel(v, n)
    full = score_space(k, soc, n)
    for i in [full.best_index(), *full.ranked(16)]:
        want = compute_tiling([n], v, full.params(i), soc, "exact", period(v, n) or None)
        if not validate(want, soc):
            break
    assert model_best(n, v, soc, 1, period(v, n)).params == want.params

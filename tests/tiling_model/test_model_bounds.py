"""The fast paths of the cost model give the slow paths' answers: the specification's bounds bound its
predictions (and equal them where they say so), and the pruned scoring picks and ranks as the full one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import SOCS, kernel, sizes, variants

import tiling_model.simulate as sim
from tiling_model import Variant, engine, load_soc
from tiling_model.space import BLOCK_CHOICES, enumerate_space, score_space


@settings(max_examples=80, deadline=None)
@given(variants, sizes, st.sampled_from(SOCS))
def test_bounds_bound_and_certain_rows_are_exact(v: Variant, n: int, soc_name: str) -> None:
    soc, k = load_soc(soc_name), kernel(v, n)
    block, bn, tile, cores = enumerate_space(k, soc, n)
    kinds = engine.core_kinds(n, k.elem_bytes, block, bn, tile, cores)
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

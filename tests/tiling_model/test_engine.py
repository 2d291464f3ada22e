"""The engine (the C++ model the build compiles, bound as tiling_model._engine) is its specification,
the vectorised NumPy simulator: the same prediction to the bit for one tiling of either scheme in every
L2 state, the same columns for a whole space, the same bounds, the same re-fit pick, and the model's
best over the whole space is the specification's best valid tiling."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import SOCS, kernel, period, sizes, variants

import tiling_model.model_types as mt
import tiling_model.simulate as sim
from tiling_model import SocProfile, TilingParams, Variant, _engine, compute_tiling, engine, load_soc
from tiling_model.correction import IDENTITY, KnobCorrection
from tiling_model.cost import engine_kinds, kinds_of, predict_detail
from tiling_model.model_types import SteadyL2
from tiling_model.pick import model_best, refit
from tiling_model.residual import NONE, WIDTH, Residual
from tiling_model.space import BLOCK_CHOICES, ScoredSpace, enumerate_space, score_space, tile_choices
from tiling_model.tiling import TilingData, TilingError
from tiling_model.validate import validate

L2_STATES = [False, True, SteadyL2(64 * 2**20, 2.0, 192 * 2**20), "steady"]


def corrected(soc_name: str, seed: int | None) -> SocProfile:
    """The SoC's profile, with a knob correction (unless ``seed`` is a multiple of 3) and a residual (if it is
    even) drawn from ``seed`` (None: as shipped, neither)."""
    soc = load_soc(soc_name)
    if seed is None:
        return soc
    rng = np.random.default_rng(seed)
    f = lambda m: tuple(float(x) for x in np.exp(rng.normal(0, 0.05, m)))  # noqa: E731
    knob = KnobCorrection(f(16), f(5), f(4), f(65)) if seed % 3 else IDENTITY
    residual = Residual(tuple(float(b) for b in rng.normal(0, 0.05, WIDTH))) if seed % 2 == 0 else NONE
    return replace(soc, knob_correction=knob, residual=residual)


def spec_space(v: Variant, n: int, soc: str | SocProfile, blocks: tuple[int, ...] | None = None,
               buffers: tuple[int, ...] | None = None, l2: mt.L2State = mt.DEFAULT_L2) -> ScoredSpace:  # fmt: skip
    """The whole space scored by the specification alone (no engine): simulate, then the knob correction's
    and the residual's factors."""
    soc, k = (load_soc(soc) if isinstance(soc, str) else soc), kernel(v, n)
    block, bn, tile, cores = enumerate_space(k, soc, n, blocks, buffers)
    kinds = engine.core_kinds(n, k.elem_bytes, block, bn, tile, cores)
    r = sim.simulate(k, kinds, soc, np.full(block.shape, n), l2)
    factors = sim.knob_factors(k, soc, block, bn, tile, kinds.block_dim) * sim.residual_factors(
        k, soc, n, block, bn, tile, cores
    )
    r = replace(r, predicted_us=r.predicted_us * factors)
    return ScoredSpace(block, bn, tile, cores, r)


def assert_traffic_is_the_specifications(t: TilingData, soc: SocProfile, l2: mt.L2State, spec_bytes: float) -> None:
    """A launch's bytes three ways: the specification's (doubles), the engine's (doubles) and the whole
    number a Prediction reports; equal while the doubles are exact (< 2**53)."""
    k = engine_kinds(t)
    engine_bytes = engine.evaluate(t.kernel, soc, k, t.fields.tileDataNum, t.params.buffer_num, t.n, l2).bytes_moved
    reported = predict_detail(t, soc, l2).bytes_moved
    assert reported < 2**53 and reported == engine_bytes == spec_bytes


@settings(max_examples=300, deadline=None)
@given(
    variants,
    st.integers(0, 10**11),
    st.sampled_from(SOCS),
    st.sampled_from([32, 512, 4096]),
    st.sampled_from([1, 2]),
    st.sampled_from([512, 1024, 4096, 8192]),
    st.integers(1, 48),
    st.sampled_from(L2_STATES),
)
def test_one_prediction_is_the_specification_to_the_bit(
    v: Variant, n: int, soc_name: str, block: int, bn: int, tile: int, cores: int, l2: mt.L2State
) -> None:
    soc = load_soc(soc_name)
    try:
        t = compute_tiling([n], v, TilingParams(block, bn, tile, cores), soc, "exact", period(v, n) or None)
    except TilingError:
        assume(False)
        raise
    fast = predict_detail(t, soc, l2)
    r = sim.simulate(t.kernel, kinds_of(t), soc, np.array([t.n]), l2)
    assert fast.predicted_us == r.predicted_us[0] and fast.roofline_us == r.roofline_us[0]
    assert fast.core_us == r.core_us[0] and fast.bandwidth_us == r.bandwidth_us[0]
    assert list(fast.busy_us.values()) == list(r.busy_us[0])
    assert_traffic_is_the_specifications(t, soc, l2, r.bytes_moved[0])


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["float16", "float32"]),
    st.sampled_from(["none", "sum", "mean"]),
    st.integers(0, 10**9),
    st.sampled_from(SOCS),
    st.sampled_from([32, 512, 2048]),
    st.integers(1, 48),
    st.sampled_from(L2_STATES),
)
def test_the_seed_scheme_with_its_scalar_queue_is_the_specification_to_the_bit(
    dtype: str, reduction: str, n: int, soc_name: str, block: int, cores: int, l2: mt.L2State
) -> None:
    soc = load_soc(soc_name)
    t = compute_tiling([n], Variant(dtype, reduction), TilingParams(block, None, None, cores), soc, "seed")
    fast = predict_detail(t, soc, l2)
    r = sim.simulate(t.kernel, kinds_of(t), soc, np.array([t.n]), l2)
    assert (fast.predicted_us, fast.bandwidth_us, fast.roofline_us) == (
        r.predicted_us[0], r.bandwidth_us[0], r.roofline_us[0]
    )  # fmt: skip
    assert_traffic_is_the_specifications(t, soc, l2, r.bytes_moved[0])


@settings(max_examples=40, deadline=None)
@given(variants, sizes, st.sampled_from(SOCS), st.sampled_from(L2_STATES), st.none() | st.integers(0, 1000))
def test_a_whole_space_and_its_bounds_are_the_specifications_to_the_bit(
    v: Variant, n: int, soc_name: str, l2: mt.L2State, correction: int | None
) -> None:
    soc, k = corrected(soc_name, correction), kernel(v, n)
    want = spec_space(v, n, soc, l2=l2)
    got = score_space(k, soc, n, l2)
    for field in ("predicted_us", "core_us", "bandwidth_us", "busy_us", "bytes_moved", "roofline_us"):
        assert np.array_equal(getattr(got.result, field), getattr(want.result, field)), field
    kinds = engine.core_kinds(n, k.elem_bytes, want.block_bytes, want.buffer_num, want.tile_bytes, want.core_num)
    lower, certain = sim.bounds_us(k, kinds, soc, np.full(want.block_bytes.shape, n), l2)
    knobs = (want.block_bytes, want.buffer_num, want.tile_bytes)
    lower = lower * (
        sim.knob_factors(k, soc, *knobs, kinds.block_dim) * sim.residual_factors(k, soc, n, *knobs, want.core_num)
    )
    e_lower, e_certain = engine.bound(k, soc, n, want.block_bytes, want.buffer_num, want.tile_bytes, want.core_num, l2)
    assert np.array_equal(e_lower, lower) and np.array_equal(e_certain, certain)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(variants, st.integers(1, 10**9), st.sampled_from(L2_STATES), st.integers(0, 6)), max_size=5),
    st.sampled_from(SOCS),
    st.integers(0, 5),
    st.integers(0, 2**31),
)
def test_many_sizes_in_one_call_are_each_sizes_own_scores_to_the_bit(
    groups: list[tuple[Variant, int, mt.L2State, int]], soc_name: str, correction: int, seed: int
) -> None:
    """``score_groups`` (a device fit's cases under each profile it tries) predicts each size's rows as ``score``
    predicts that size alone, to the bit; a size may have no rows."""
    soc, rng = corrected(soc_name, correction), np.random.default_rng(seed)
    spec, cols, want = [], [], []
    for v, n, l2, rows in groups:
        k = kernel(v, n)
        block, bn, tile, cores = enumerate_space(k, soc, n)
        pick = rng.choice(block.size, size=min(rows, block.size), replace=False)
        knobs = (block[pick], bn[pick], tile[pick], cores[pick])
        spec.append((k, n, l2))
        cols.append(knobs)
        want.append(engine.score(k, soc, n, *knobs, l2).predicted_us)
    starts = np.cumsum([0] + [c[0].size for c in cols])
    got = engine.score_groups(soc, spec, starts, *(np.concatenate([c[j] for c in cols] or [np.zeros(0, int)])
                                                 for j in range(4)))  # fmt: skip
    assert np.array_equal(got, np.concatenate(want or [np.zeros(0)]))


def test_many_sizes_bad_arguments_are_clear_errors() -> None:
    soc, k = load_soc("Ascend910B2"), kernel(Variant("float32", "none"), 1000)
    one = np.array([512]), np.array([2]), np.array([512]), np.array([1])
    with pytest.raises(ValueError, match="one more start than sizes"):
        engine.score_groups(soc, [(k, 1000, False)], np.array([0]), *one)
    with pytest.raises(ValueError, match="from 0 to the number of configurations"):
        engine.score_groups(soc, [(k, 1000, False)], np.array([0, 2]), *one)
    with pytest.raises(ValueError, match="must not decrease"):
        engine.score_groups(soc, [(k, 1000, False), (k, 10, False)], np.array([0, 2, 1]), *one)
    with pytest.raises(ValueError, match="same length"):
        engine.score_groups(soc, [(k, 1000, False)], np.array([0, 1]), np.array([512]), np.array([2, 2]),
                            np.array([512]), np.array([1]))  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    variants, sizes, st.sampled_from(SOCS), st.lists(st.sampled_from(BLOCK_CHOICES), min_size=1, unique=True), st.data()
)
def test_the_refit_picks_what_the_specification_picks(
    v: Variant, n: int, soc_name: str, blocks: list[int], data: st.DataObject
) -> None:
    soc, k = corrected(soc_name, data.draw(st.none() | st.integers(0, 1000))), kernel(v, n)
    bn = data.draw(st.sampled_from(k.allowed_buffer_nums()))
    assume(tile_choices(k, soc, bn).size > 0)
    full = spec_space(v, n, soc, tuple(blocks), (bn,))
    want = full.params(full.best_index())
    seed = data.draw(
        st.none() | st.tuples(st.sampled_from(blocks), st.sampled_from([512, 4096, 8192]), st.integers(1, 48))
    )
    got = engine.refit(k, soc, n, tuple(blocks), bn, int(tile_choices(k, soc, bn)[-1]), seed)
    assert (got.block_bytes, got.tile_bytes, got.core_num) == (want.block_bytes, want.tile_bytes, want.core_num)
    assert got.us == full.result.predicted_us.min()


@settings(max_examples=60, deadline=None)
@given(variants, sizes, st.sampled_from(SOCS), st.data())
def test_the_refit_across_buffer_counts_picks_what_the_specification_picks(
    v: Variant, n: int, soc_name: str, data: st.DataObject
) -> None:
    """Each buffer count's search bounded by the ones before it, in any order: the whole space's best."""
    soc, k = corrected(soc_name, data.draw(st.none() | st.integers(0, 1000))), kernel(v, n)
    slices = [(bn, int(t[-1])) for bn in k.allowed_buffer_nums() if (t := tile_choices(k, soc, bn)).size]
    assume(slices)
    full = spec_space(v, n, soc)
    want = full.params(full.best_index())
    got = engine.refit_across(k, soc, n, BLOCK_CHOICES, list(data.draw(st.permutations(slices))))
    assert got == (want.block_bytes, want.buffer_num, want.tile_bytes, want.core_num)


@pytest.mark.parametrize("n", [3_001, 70_001, 1_000_003, 9_000_001])
def test_a_device_fitted_profile_refits_every_buffer_count_a_shipped_one_keeps_the_buckets(n: int) -> None:
    """pick.refit: with a device's correction or residual the model chooses the buffer count at an untimed
    size (the whole space's best); with a shipped profile the bucket's BUFFER_NUM stays."""
    v = Variant("float32", "none")
    shipped, fitted = load_soc("Ascend910B2"), corrected("Ascend910B2", 4)
    assert engine.learned(fitted) and not engine.learned(shipped)
    bucket = TilingParams(512, 1, 4096, 8)  # single buffering: rarely the model's best
    assert refit(n, v, shipped, bucket).buffer_num == 1
    got, best = refit(n, v, fitted, bucket), model_best(n, v, fitted).params
    assert best.buffer_num != 1
    assert (got.block_bytes, got.buffer_num, got.tile_bytes, got.core_num) == (
        best.block_bytes, best.buffer_num, best.tile_bytes, best.core_num
    )  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(variants, sizes, st.sampled_from(SOCS))
def test_the_models_best_is_the_whole_spaces_best_valid(v: Variant, n: int, soc_name: str) -> None:
    soc = load_soc(soc_name)
    full = spec_space(v, n, soc_name)
    for i in [full.best_index(), *full.ranked(16)]:
        want = compute_tiling([n], v, full.params(i), soc, "exact", period(v, n) or None)
        if not validate(want, soc):
            break
    assert model_best(n, v, soc, 1, period(v, n)).params == want.params


def test_the_engines_constants_are_the_specifications() -> None:
    assert (_engine.WARMUP, _engine.PERIOD, _engine.REPEAT_BYTES) == (mt.WARMUP, mt.PERIOD, mt.REPEAT_BYTES)
    assert _engine.GM_ALIGN_BYTES == mt.GM_ALIGN_BYTES
    assert (_engine.BOUND_SLACK, _engine.PRUNE_MARGIN_US, _engine.PRUNE_RELATIVE) == (
        mt.BOUND_SLACK, mt.PRUNE_MARGIN_US, mt.PRUNE_RELATIVE
    )  # fmt: skip
    assert _engine.DUP_CYCLES == mt.DUP_CYCLES


def test_the_stub_names_exactly_what_the_module_has() -> None:
    """tiling_model/_engine.pyi is what mypy checks callers against: it must not drift from the binding."""
    tree = ast.parse((Path(engine.__file__).parent / "_engine.pyi").read_text())
    stubbed = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    stubbed |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    public = {name for name in dir(_engine) if not name.startswith("_")}
    assert stubbed == public


@pytest.mark.parametrize("bad", ["cold", 0.5, None])
def test_an_unknown_l2_state_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ValueError, match="unknown L2 state"):
        engine.l2_state(bad)  # type: ignore[arg-type]


def test_bad_engine_arguments_are_clear_errors() -> None:
    soc, k = load_soc("Ascend910B2"), kernel(Variant("float32", "none"), 1000)
    with pytest.raises(ValueError, match="same length"):
        engine.score(k, soc, 1000, np.array([512]), np.array([2, 2]), np.array([512]), np.array([1]), "steady")
    with pytest.raises(ValueError, match="too many block sizes"):
        engine.refit(k, soc, 1000, tuple(range(32, 32 * 40, 32)), 2, 8192)
    with pytest.raises(ValueError, match="two points"):
        _engine.Soc(name="x", aiv_cores=1, launch_us=1, core_start_us=0, vector_start_cycles=0, vector_mhz=1,
                    misaligned_factor=1, hbm_gbps=1, l2_gbps=1, hbm_peak_gbps=1, l2_peak_gbps=1, l2_half_bytes=1,
                    l2_falloff=1, l2_bytes=1, mte2_curve_kib_us=[(1.0, 1.0)],
                    mte3_curve_kib_us=[(1.0, 1.0), (2.0, 2.0)])  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.floats(0.0, 1e7, allow_nan=False))
def test_a_ties_key_is_the_prediction_rounded_as_numpy_rounds_it(us: float) -> None:
    """TieKey (what the space, the re-fit and the build break ties on) is np.round(us, 9), to the bit."""
    assert _engine.tie_key(us) == float(np.round(us, 9))

"""The pipeline cost model: each cost term, the event order, ranking sanity, speed paths agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiling_model import (
    BadRequest,
    TilingData,
    TilingParams,
    Variant,
    compute_tiling,
    load_soc,
    predict,
    predict_detail,
    valid_combinations,
)
from tiling_model.cost import kinds_of
from tiling_model.kernels import CYCLES_PER_REPEAT, bce_grad_kernel, elementwise_kernel
from tiling_model.model_types import CoreKinds
from tiling_model.simulate import copy_us, pipeline, simulate, vector_us
from tiling_model.space import score_space
from tiling_model.tiling import tile_kernel

SOC = load_soc("Ascend910B2")
COMBO = st.sampled_from(valid_combinations())


# --- cost terms -------------------------------------------------------------------------------


def test_copy_cost_follows_the_measured_curve_and_the_bandwidth_share() -> None:
    pts = ((1.0, 0.2), (2.0, 0.3), (4.0, 0.5))  # KiB -> us: 0.1 us fixed, 10.24 GB/s slope
    fast = np.array([1e9])
    assert copy_us(np.array([1024]), pts, fast, True, 0.7)[0] == pytest.approx(0.2)
    assert copy_us(np.array([3072]), pts, fast, True, 0.7)[0] == pytest.approx(0.4)  # interpolated
    assert copy_us(np.array([8192]), pts, fast, True, 0.7)[0] == pytest.approx(0.9)  # last slope onward
    # a core's share of HBM caps it: 4096 B at 1 GB/s = 4.096 us plus the 0.1 us fixed cost
    assert copy_us(np.array([4096]), pts, np.array([1.0]), True, 0.7)[0] == pytest.approx(4.196)
    # a misaligned copy gets 70% of the bandwidth part, the fixed part unchanged
    assert copy_us(np.array([4096]), pts, fast, False, 0.7)[0] == pytest.approx(0.1 + 0.4 / 0.7)
    assert copy_us(np.array([0]), pts, fast, True, 0.7)[0] == 0.0


def test_vector_cost_is_start_plus_repeats_at_the_measured_rate() -> None:
    k = elementwise_kernel("float32", 2, 1, ["sub", "muls", "exp"])
    elems = np.array([1000])  # 4000 B = 16 repeats (ceil of 15.6)
    cycles = 3 * SOC.vector_start_cycles + 16 * (CYCLES_PER_REPEAT["sub"] + 1.0 + 2.0)
    assert vector_us(k, elems, SOC)[0] == pytest.approx(cycles * SOC.vector_cycle_scale / SOC.clock_mhz)
    half = elementwise_kernel("float16", 2, 1, ["sub"])  # casts up, sub in fp32, cast down
    assert [op.name for op in half.ops] == ["cast", "cast", "sub", "cast_f32_f16"]


def test_pipeline_event_order_two_tiles_by_hand() -> None:
    # stages (in, vec, out): full tile (3, 1, 2), tail (2, 1, 1)
    full = tuple(np.array([x]) for x in (3.0, 1.0, 2.0))
    tail = tuple(np.array([x]) for x in (2.0, 1.0, 1.0))
    # bn=1: in0 0-3, v0 3-4, out0 4-6; in1 waits for v0's buffer: 4-6; v1 waits for out0: 6-7; out1 7-8
    assert pipeline(np.array([2]), full, tail, np.array([1]))[0] == pytest.approx(8.0)
    # bn=2: in1 3-5 right after in0; v1 5-6; out1 waits for out0 (ends 6): 6-7
    assert pipeline(np.array([2]), full, tail, np.array([2]))[0] == pytest.approx(7.0)


def test_two_cores_two_tiles_by_hand() -> None:
    k = elementwise_kernel("float32", 1, 1, ["abs"])
    soc = load_soc("Ascend910B2")
    # 2 cores (big + last), 2 tiles each of 1024 elements (4 KiB), all aligned
    kinds = CoreKinds(
        cores=np.array([[1, 0, 1]]),
        elems=np.array([[2048, 0, 2048]]),
        tiles=np.array([[2, 0, 2]]),
        tail=np.array([[1024, 0, 1024]]),
        aligned=np.array([[True, True, True]]),
        tile_elems=np.array([1024]),
        buffer_num=np.array([2]),
        block_dim=np.array([2]),
    )
    r = simulate(k, kinds, soc, np.array([4096]))
    share = np.array([soc.hbm_gbps / 2])
    a = copy_us(np.array([4096]), soc.mte2_curve_kib_us, share, True, 1.0)[0]
    c = copy_us(np.array([4096]), soc.mte3_curve_kib_us, share, True, 1.0)[0]
    b = vector_us(k, np.array([1024]), soc)[0]
    # bn=2, identical tiles: in0, in1 back to back; v1 after max(in1, v0); out1 after max(v1, out0)
    t_in1 = 2 * a
    t_v0 = a + b
    t_out0 = t_v0 + c
    t_v1 = max(t_in1, t_v0) + b
    t_out1 = max(t_v1, t_out0) + c
    assert r.core_us[0] == pytest.approx(t_out1 + soc.core_start_us)
    assert r.predicted_us[0] == pytest.approx(soc.launch_us + max(t_out1 + soc.core_start_us, r.bandwidth_us[0]))
    assert r.bytes_moved[0] == 2 * 4096 * 4


def test_long_runs_match_the_tile_by_tile_recurrence() -> None:
    def naive(n: int, f: tuple, t: tuple, bn: int) -> float:
        ie = ce = oe = 0.0
        hc, ho = [0.0] * n, [0.0] * n
        for i in range(n):
            a, b, c = t if i == n - 1 else f
            ie = max(ie, hc[i - bn] if i >= bn else 0.0) + a
            ce = max(ie, ce, ho[i - bn] if i >= bn else 0.0) + b
            oe = max(ce, oe) + c
            hc[i], ho[i] = ce, oe
        return oe

    rng = np.random.default_rng(7)
    rows = 400
    n = rng.integers(1, 300, rows)
    bn = rng.integers(1, 5, rows)
    f = rng.uniform(0.05, 1.0, (rows, 3))
    t = rng.uniform(0.05, 1.0, (rows, 3))
    got = pipeline(n, tuple(f.T), tuple(t.T), bn)
    ref = np.array([naive(int(n[i]), tuple(f[i]), tuple(t[i]), int(bn[i])) for i in range(rows)])
    short = n <= 24
    assert np.allclose(got[short], ref[short], rtol=1e-12)  # simulated tile by tile: exact
    assert np.max(np.abs(got / ref - 1)) < 0.01  # steady-state jump: within 1%


# --- whole-model behaviour ---------------------------------------------------------------------


def test_empty_tensor_costs_nothing() -> None:
    assert predict(compute_tiling([0], Variant("float32", "none"))) == 0.0


def test_tiny_launch_is_launch_bound() -> None:
    d = predict_detail(compute_tiling([64], Variant("float32", "none")))
    assert d.bottleneck == "launch"
    assert SOC.launch_us < d.predicted_us < 2 * SOC.launch_us


@given(st.integers(1, 10**9), COMBO, st.booleans())
def test_never_faster_than_the_roofline(n: int, combo: tuple[str, str], warm: bool) -> None:
    dtype, reduction = combo
    t = compute_tiling([n], Variant(dtype, reduction))
    d = predict_detail(t, l2=warm)
    assert d.predicted_us >= d.roofline_us - 1e-9
    assert 0 < d.fraction_of_roofline <= 1.0 + 1e-12
    assert d.bytes_moved >= (len(t.kernel.full_inputs) + 1) * n * t.elem_bytes


@given(st.integers(1, 10**9), COMBO)
def test_more_elements_never_cost_less(n: int, combo: tuple[str, str]) -> None:
    dtype, reduction = combo
    assert (
        predict(compute_tiling([2 * n], Variant(dtype, reduction)))
        >= predict(compute_tiling([n], Variant(dtype, reduction))) - 1e-9
    )


def test_warm_l2_helps_what_fits_and_not_what_does_not() -> None:
    small = compute_tiling([1 << 22], Variant("float32", "none"))  # 80 MiB of traffic: fits 192 MiB
    huge = compute_tiling([1 << 28], Variant("float32", "none"))  # 5 GiB: 4% fits
    assert predict(small, l2=True) < 0.8 * predict(small, l2=False)
    assert predict(huge, l2=True) > 0.9 * predict(huge, l2=False)
    # the default, the fitted steady state of repeated launches, lies between; near cold when huge
    for t in (small, huge):
        assert predict(t, l2=True) <= predict(t) <= predict(t, l2=False)
    assert predict(huge) > 0.95 * predict(huge, l2=False)


# --- ranking sanity: what the hardware facts imply ----------------------------------------------


@pytest.mark.parametrize("n", [1 << 20, 1 << 24, 1 << 27])
def test_more_cores_help_large_inputs(n: int) -> None:
    times = [predict(compute_tiling([n], Variant("float32", "none"), TilingParams(core_num=c))) for c in (1, 4, 16, 48)]
    assert times == sorted(times, reverse=True) and times[0] > 4 * times[-1]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tiny_tiles_hurt_through_per_copy_cost(dtype: str) -> None:
    n = 1 << 22
    times = [
        predict(compute_tiling([n], Variant(dtype, "none"), TilingParams(tile_bytes=t))) for t in (512, 2048, 8192)
    ]
    assert times[0] > times[1] > times[2]
    assert times[0] > 2 * times[2]


@given(st.integers(10**4, 10**8), COMBO, st.integers(1, 48))
def test_single_buffering_loses_the_overlap(n: int, combo: tuple[str, str], cores: int) -> None:
    dtype, reduction = combo
    one = compute_tiling([n], Variant(dtype, reduction), TilingParams(buffer_num=1, tile_bytes=8192, core_num=cores))
    two = compute_tiling([n], Variant(dtype, reduction), TilingParams(buffer_num=2, tile_bytes=8192, core_num=cores))
    assert predict(one) >= predict(two) - 1e-9
    if one.fields.finalSmallTileNum > 4 and predict_detail(two).bottleneck != "hbm":
        assert predict(one) > predict(two)


def test_unaligned_gm_starts_cost_bandwidth() -> None:
    n = 1 << 26
    aligned = compute_tiling([n], Variant("float32", "none"), TilingParams(512, 2, 8192, 48))
    unaligned = compute_tiling([n], Variant("float32", "none"), TilingParams(512, 2, 8192 + 32, 48))
    assert predict(unaligned) > 1.2 * predict(aligned)


def test_absent_inputs_are_traffic_saved() -> None:
    n = 1 << 26
    with_w = predict_detail(compute_tiling([n], Variant("float32", "none", weight=True)))
    without = predict_detail(compute_tiling([n], Variant("float32", "none", weight=False)))
    assert with_w.bytes_moved == 5 * n * 4 and without.bytes_moved == 4 * n * 4
    assert without.predicted_us < 0.85 * with_w.predicted_us


# --- the vectorised path ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,dtype,reduction,weight", [(1000, "float16", "mean", True), (3 << 20, "float32", "none", False)]
)
def test_scoring_the_space_agrees_with_single_predictions(n: int, dtype: str, reduction: str, weight: bool) -> None:
    kernel = bce_grad_kernel(Variant(dtype, reduction, weight))
    scored = score_space(kernel, SOC, n)
    rng = np.random.default_rng(3)
    for i in [scored.best_index(), *rng.integers(0, len(scored), 25)]:
        t = compute_tiling([n], Variant(dtype, reduction, weight), scored.params(int(i)), SOC)
        assert scored.result.predicted_us[i] == pytest.approx(predict(t), rel=1e-12)


def test_generic_kernel_predicts_like_the_bce_kernel_with_the_same_streams() -> None:
    bce = compute_tiling([1 << 20], Variant("float32", "none", weight=False))  # grad, logits, labels -> z: sub, mul
    generic = tile_kernel(elementwise_kernel("float32", 3, 1, ["sub", "mul"]), [1 << 20], None, SOC)
    assert predict(generic) == pytest.approx(predict(bce))


def _kinds_from_plan(t: TilingData) -> tuple[list[int], list[int], list[int], list[int], list[bool]]:
    """The per-kind work read core by core from core_plan (what kinds_of gives in closed form)."""
    from tiling_model.model_types import GM_ALIGN_BYTES, KINDS
    from tiling_model.plan import core_plan

    plans = core_plan(t)
    tile_ok = (t.fields.tileDataNum * t.elem_bytes) % GM_ALIGN_BYTES == 0
    out: tuple[list, list, list, list, list] = ([], [], [], [], [])
    for kind in KINDS:
        group = [c for c in plans if c.kind == kind]
        row = (len(group), group[0].count, group[0].tiles, group[0].tail_elems) if group else (0, 0, 0, 0)
        for column, value in zip(out, row, strict=False):
            column.append(value)
        out[4].append(not group or (tile_ok and all((c.start * t.elem_bytes) % GM_ALIGN_BYTES == 0 for c in group)))
    return out


@settings(max_examples=400, deadline=None)
@given(
    st.integers(0, 10**7),
    st.sampled_from(["float16", "float32", "int16"]),
    st.sampled_from([32, 64, 512, 1024]),
    st.sampled_from([1, 2]),
    st.sampled_from([64, 512, 1000, 8192]),
    st.integers(1, 48),
    st.sampled_from(["exact", "seed"]),
)
def test_kinds_in_closed_form_are_the_core_plans(
    n: int, dtype: str, block: int, bn: int, tile: int, cores: int, scheme: str
) -> None:
    try:
        t = compute_tiling([n], Variant(dtype), TilingParams(block, bn, tile, cores), "Ascend910B2", scheme)  # type: ignore[arg-type]
    except BadRequest:
        return
    k = kinds_of(t)
    cores_, elems, tiles, tail, aligned = _kinds_from_plan(t)
    assert k.cores[0].tolist() == cores_ and k.elems[0].tolist() == elems
    assert k.tiles[0].tolist() == tiles and k.tail[0].tolist() == tail and k.aligned[0].tolist() == aligned

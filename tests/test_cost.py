"""The first cost model: its documented behaviour, as properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tiling_model import TilingParams, compute_tiling, load_soc, predict, predict_detail, valid_combinations

COMBO = st.sampled_from(valid_combinations())


def test_empty_tensor_costs_nothing() -> None:
    assert predict(compute_tiling([0], "float32", "none")) == 0.0


def test_tiny_launch_is_launch_bound() -> None:
    d = predict_detail(compute_tiling([64], "float32", "none"))
    assert d.bottleneck == "launch"
    assert load_soc("Ascend910B2").launch_us < d.predicted_us < 2 * load_soc("Ascend910B2").launch_us


@given(st.integers(1, 10**9), COMBO)
def test_never_faster_than_hbm_bandwidth_allows(n: int, combo: tuple[str, str]) -> None:
    dtype, reduction = combo
    t = compute_tiling([n], dtype, reduction)
    d = predict_detail(t)
    soc = load_soc(t.soc)
    assert d.predicted_us >= soc.launch_us + d.bytes_moved / (soc.hbm_gbps * 1e3) - 1e-9
    assert d.bytes_moved >= (len(t.layout.full_inputs) + 1) * n * t.elem_bytes


@given(st.integers(10**4, 10**8), COMBO, st.integers(1, 48))
def test_single_buffering_is_never_faster(n: int, combo: tuple[str, str], cores: int) -> None:
    dtype, reduction = combo
    one = compute_tiling([n], dtype, reduction, TilingParams(buffer_num=1, tile_bytes=8192, core_num=cores))
    two = compute_tiling([n], dtype, reduction, TilingParams(buffer_num=2, tile_bytes=8192, core_num=cores))
    assert predict(one) >= predict(two) - 1e-9


@given(st.integers(1, 10**9), COMBO)
def test_more_elements_never_cost_less(n: int, combo: tuple[str, str]) -> None:
    dtype, reduction = combo
    assert predict(compute_tiling([2 * n], dtype, reduction)) >= predict(compute_tiling([n], dtype, reduction)) - 1e-9


def test_unaligned_gm_starts_cost_bandwidth() -> None:
    n = 1 << 26
    aligned = compute_tiling([n], "float32", "none", TilingParams(512, 2, 8192, 48))
    unaligned = compute_tiling([n], "float32", "none", TilingParams(512, 2, 8192 + 32, 48))
    assert predict_detail(aligned).bottleneck == "hbm"
    ratio = predict(unaligned) / predict(aligned)
    assert 1.3 < ratio < 1.45  # 32-B aligned copies reach 70% of the 512-B aligned bandwidth


def test_fewer_cores_cost_time_once_per_core_dma_dominates() -> None:
    n = 1 << 22
    few = predict(compute_tiling([n], "float32", "none", TilingParams(core_num=2)))
    many = predict(compute_tiling([n], "float32", "none", TilingParams(core_num=48)))
    assert few > 5 * many

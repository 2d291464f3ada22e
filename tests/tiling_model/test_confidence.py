"""tiling_model.confidence: a prediction's interval is its traffic class's held-out band (the overall
band where the class has none), nothing where the profile records no held-out errors."""

from __future__ import annotations

import dataclasses

import pytest

from tiling_model import TilingParams, Variant, compute_tiling, load_soc
from tiling_model.confidence import TRAFFIC_CLASSES, interval, traffic_bytes, traffic_class

SOC = load_soc("Ascend910B2")
PARAMS = TilingParams(block_bytes=512, buffer_num=2, tile_bytes=8192, core_num=20)


def tiling(n: int, dtype: str = "float32"):  # type: ignore[no-untyped-def]
    return compute_tiling([n], Variant(dtype, "none"), PARAMS, SOC, "exact")


def test_the_classes_cover_every_size_once_at_their_edges() -> None:
    assert [traffic_class(b) for b in (0, 4e6 - 1, 4e6, 100e6 - 1, 100e6, 1e15)] == [
        "< 4 MB", "< 4 MB", "4-100 MB", "4-100 MB", "> 100 MB", "> 100 MB",
    ]  # fmt: skip
    assert [name for name, *_ in TRAFFIC_CLASSES] == ["< 4 MB", "4-100 MB", "> 100 MB"]


def test_traffic_counts_every_stream_of_the_call() -> None:
    t = tiling(1 << 20)
    assert traffic_bytes(t) == t.kernel.streams * (1 << 20) * 4
    assert traffic_bytes(tiling(1 << 20, "float16")) == traffic_bytes(t) // 2


def test_the_band_of_the_calls_class_scales_the_prediction() -> None:
    soc = dataclasses.replace(SOC, calibration={"intervals": {"< 4 MB": [0.9, 1.2], "all": [0.5, 2.0]}})
    small, large = tiling(4096), tiling(1 << 24)
    assert interval(small, soc, 10.0) == (9.0, 12.0)
    assert interval(large, soc, 10.0) == (5.0, 20.0)  # its class has no band: the overall one


@pytest.mark.parametrize("calibration", [None, {}, {"intervals": "x"}, {"intervals": {"all": [1.0]}}])
def test_no_interval_without_held_out_errors(calibration: dict | None) -> None:
    assert interval(tiling(4096), dataclasses.replace(SOC, calibration=calibration), 10.0) is None


def test_no_interval_for_a_prediction_of_nothing() -> None:
    soc = dataclasses.replace(SOC, calibration={"intervals": {"all": [0.9, 1.1]}})
    assert interval(tiling(4096), soc, 0.0) is None

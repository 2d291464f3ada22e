"""The stand-in devices: a knob-shaped one prices knobs whatever the size, a realised or crossed one what the
knobs make of a size; the shared part of their effects is what a learnt model can know (the floor)."""

from __future__ import annotations

import numpy as np
import pytest

from tiling_model import Variant, load_soc
from tuner.backends import make_backend
from tuner.synthetic import SyntheticBackend, SyntheticDevice, synthetic_backend

SOC = load_soc("Ascend910B2")
RNG = np.random.default_rng(3)
M = 300
KNOBS = (
    RNG.choice([256, 512, 1024, 2048], M),
    RNG.integers(1, 5, M),
    512 * RNG.integers(1, 120, M),
    RNG.integers(4, 49, M),
)


def _shared(d: SyntheticDevice, n: int) -> np.ndarray:
    return d.effects(*KNOBS, key_salt=0, n=n, elem=4, shared_only=True)


def test_a_knob_device_prices_knobs_whatever_the_size() -> None:
    d = SyntheticDevice(SOC, 5)
    assert np.array_equal(_shared(d, 100_003), _shared(d, 7_777_777))


def test_a_realised_device_prices_what_the_knobs_make_of_a_size() -> None:
    d = SyntheticDevice(SOC, 5, shape="realised")
    a, b = _shared(d, 100_003), _shared(d, 7_777_777)
    assert np.mean(a != b) > 0.5  # the same knobs, other core boundaries, tails and tile counts
    assert not np.array_equal(a, _shared(SyntheticDevice(SOC, 5), 100_003))
    assert np.all(np.abs(np.log(a)) < 0.5)


def test_a_crossed_device_prices_what_the_knobs_make_of_a_size_in_other_classes() -> None:
    d = SyntheticDevice(SOC, 5, shape="crossed")
    a, b = _shared(d, 100_003), _shared(d, 7_777_777)
    assert np.mean(a != b) > 0.5  # the same knobs, other last tiles and launch tile counts
    assert not np.array_equal(a, _shared(SyntheticDevice(SOC, 5, shape="realised"), 100_003))
    assert np.all(np.abs(np.log(a)) < 0.5)


@pytest.mark.parametrize("shape", ["knob", "realised", "crossed"])
def test_the_shared_part_leaves_out_only_the_per_configuration_effect(shape: str) -> None:
    d = SyntheticDevice(SOC, 2, shape=shape)
    whole = d.effects(*KNOBS, key_salt=17, n=123_457, elem=4)
    own = np.log(whole / d.effects(*KNOBS, key_salt=17, n=123_457, elem=4, shared_only=True))
    assert np.std(own) == pytest.approx(0.008, rel=0.25)  # EFFECT_SD["config"]
    assert np.all(np.abs(own) < 5 * 0.008)


def test_the_floor_never_beats_the_optimum() -> None:
    d = SyntheticDevice(SOC, 3, shape="realised")
    v = Variant("float16", "none", "full")
    for n in (4097, 1_000_001):
        best, _ = d.optimum(v, n)
        _, floor = d.optimum(v, n, shared_only=True)
        assert d.true_us(v, n, floor) >= best


def test_an_unknown_shape_is_named() -> None:
    with pytest.raises(ValueError, match="unknown stand-in device shape 'tiled'; known: knob, realised, crossed"):
        synthetic_backend("Ascend910B2", shape="tiled")


def test_the_sweep_backend_takes_the_shape() -> None:
    b = make_backend("synthetic", seed=3, soc="Ascend910B2", device_shape="realised")
    assert isinstance(b, SyntheticBackend) and b.device.shape == "realised" and b.device.seed == 3
    with pytest.raises(
        ValueError, match="--device-shape shapes the synthetic backend's stand-in device, not the 'model'"
    ):
        make_backend("model", device_shape="realised")

"""tuner.device_time: what a sweep says it will spend "at most" is a bound on what it spends (every
trial's first measurement, the race with its per-round warm-ups, the seed default's own measurement)."""

from __future__ import annotations

import optuna

from tiling_model import Variant
from tuner.device_time import DeviceClock, Estimate, estimate
from tuner.key import StudyKey
from tuner.protocol import MeasurementProtocol
from tuner.study import tune
from tuner.synthetic import synthetic_backend


def test_the_estimate_bounds_the_samples_a_race_spends() -> None:
    keys = [StudyKey("Ascend910B2", Variant("float16", "none"), n) for n in (4096, 1 << 20, 1 << 23)]
    protocol = MeasurementProtocol()
    clock = DeviceClock(synthetic_backend("Ascend910B2", seed=2))  # spends 581 (the old bound: 468)
    storage = optuna.storages.InMemoryStorage()
    for key in keys:
        tune(key, clock, storage, 8, protocol, strategy="race")
    planned = estimate(keys, 8, protocol)
    assert clock.samples <= planned.samples, (clock.samples, planned.samples)


def test_short_times_are_not_printed_as_zero() -> None:
    assert "0.45 s of device time" in Estimate(1, 10, 0.45).text()
    assert "12 s of device time" in Estimate(1, 10, 12.3).text()

"""tuner.race: a median's error that never trusts three agreeing samples, the model's prior pulling a
noisy median, and a race that keeps sampling the close ones and drops the clearly slower."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tiling_model import TilingParams, Variant, compute_tiling, load_soc
from tuner.race import Entrant, RacePlan, _posterior, race

SOC = load_soc("Ascend910B2")


def entrant(cores: int, samples: list[float] | None = None) -> Entrant:
    params = TilingParams(block_bytes=512, buffer_num=2, tile_bytes=8192, core_num=cores)
    return Entrant(params, compute_tiling([1 << 20], Variant("float32", "none"), params, SOC, "exact"), samples or [])


class Clock:
    """A device whose tiling of c cores takes times[c] us, with seeded lognormal noise."""

    def __init__(self, times: dict[int, float], noise: float, seed: int = 0) -> None:
        self.times, self.noise = times, noise
        self.rng = np.random.default_rng(seed)
        self.samples: dict[int, int] = {}
        self.flushes = 0

    def sample(self, tiling) -> float:  # type: ignore[no-untyped-def]
        cores = int(tiling.params.core_num)
        self.samples[cores] = self.samples.get(cores, 0) + 1
        return self.times[cores] * float(np.exp(self.rng.normal(0.0, self.noise)))

    def flush_l2(self) -> None:
        self.flushes += 1


def test_a_median_of_one_sample_is_unbounded_and_agreeing_samples_keep_a_floor() -> None:
    assert entrant(20, [10.0]).standard_error() == math.inf
    agree = entrant(20, [10.0, 10.0, 10.0])
    assert agree.standard_error() == pytest.approx(1.2533 * 0.04 / math.sqrt(3))  # the 0.4% floor


def test_a_disturbed_launch_is_left_out_of_the_median() -> None:
    e = entrant(20, [10.0, 10.1, 9.9, 10.0, 10.05, 1000.0])
    assert e.median() == pytest.approx(10.0)
    assert e._kept().size == 5


def test_the_prior_pulls_a_noisy_median_and_only_a_finite_one_counts() -> None:
    e = entrant(20, [10.0, 11.0, 9.0])
    y, v = math.log(e.median()), (e.standard_error() / e.median()) ** 2
    assert _posterior(e, lambda _: (0.0, math.inf)) == (y, v)  # no prior: the measurement
    mu, var = _posterior(e, lambda _: (math.log(12.0), v))  # a prior as sure as the samples: halfway
    assert mu == pytest.approx((y + math.log(12.0)) / 2) and var == pytest.approx(v / 2)
    assert _posterior(entrant(20, [10.0]), lambda _: (math.log(12.0), 0.01)) == (math.log(12.0), 0.01)


def test_a_clearly_slower_entrant_is_dropped_at_once() -> None:
    clock = Clock({20: 10.0, 10: 14.0}, noise=0.005)
    fast, slow = entrant(20), entrant(10)
    for e in (fast, slow):
        e.samples = [clock.sample(e.tiling) for _ in range(5)]
    winner = race(clock, [slow, fast], RacePlan(), warmup=1, flush=lambda _: True)
    assert winner is fast
    assert len(slow.samples) == 5 and len(fast.samples) == 5  # decided on the first samples: no round run


def test_close_entrants_are_sampled_until_one_leads_and_the_faster_wins() -> None:
    """1% apart under 1% noise: the five first samples cannot tell them apart, the race's rounds can
    (over 40 seeds the truly faster wins more often than by the first samples; each round flushes L2 before
    every sample)."""
    wins = raced = naive = 0
    for seed in range(40):
        clock = Clock({20: 10.0, 10: 10.1}, noise=0.01, seed=seed)
        fast, slow = entrant(20), entrant(10)
        for e in (slow, fast):
            e.samples = [clock.sample(e.tiling) for _ in range(5)]
        naive += fast.median() < slow.median()
        before = clock.flushes
        winner = race(clock, [slow, fast], RacePlan(max_samples=60), warmup=2, flush=lambda _: True)
        wins += winner is fast
        sampled = len(fast.samples) + len(slow.samples) - 10
        raced += sampled > 0
        assert clock.flushes - before == sampled
    # measured: raced 27, race 39 of 40, the first samples' medians 33 of 40
    assert raced >= 20 and wins >= 37 and wins > naive, (raced, wins, naive)


def test_equal_entrants_stop_at_their_cap() -> None:
    clock = Clock({20: 10.0, 10: 10.0}, noise=0.0)
    a, b = entrant(20, [10.0] * 5), entrant(10, [10.0] * 5)
    race(clock, [a, b], RacePlan(max_samples=11), warmup=0, flush=lambda _: False)
    assert len(a.samples) == len(b.samples) == 11 and clock.flushes == 0

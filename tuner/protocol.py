"""The measurement protocol for timed backends: warm-up, L2 flush between repetitions, at least
N repetitions, outlier rejection, median and interquartile range; and the interleaved
re-measurement of the top candidates before a winner is declared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tiling_model import SocProfile, TilingData, load_soc
from tuner.backends import Backend


@dataclass(frozen=True)
class MeasurementProtocol:
    warmup: int = 2
    repeats: int = 7
    outlier_mads: float = 5.0  # a sample further than this many MADs from the median is rejected
    confirm_top: int = 3  # candidates re-measured, interleaved, before a winner is declared
    confirm_rounds: int = 3

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.repeats < 3 or self.confirm_top < 1 or self.confirm_rounds < 1:
            raise ValueError("protocol needs warmup >= 0, repeats >= 3, confirm_top >= 1, confirm_rounds >= 1")


@dataclass(frozen=True)
class Measurement:
    samples: tuple[float, ...]  # every sample taken, outliers included
    kept: tuple[float, ...]
    median_us: float
    iqr_us: float

    def as_attrs(self) -> dict[str, object]:
        return {
            "samples": list(self.samples),
            "kept": len(self.kept),
            "median_us": self.median_us,
            "iqr_us": self.iqr_us,
        }


def summarise(samples: list[float], outlier_mads: float) -> Measurement:
    """Median and IQR of the samples left after rejecting outliers by the median absolute deviation."""
    x = np.asarray(samples, dtype=float)
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med)))
    kept = x if mad == 0 else x[np.abs(x - med) <= outlier_mads * 1.4826 * mad]
    q1, q2, q3 = np.percentile(kept, [25, 50, 75])
    return Measurement(tuple(samples), tuple(float(v) for v in kept), float(q2), float(q3 - q1))


#: A launch whose own traffic is this many times the L2 leaves nothing of an earlier launch's data
#: there: the flush before its sample decides nothing (and costs a 256 MiB write).
FLUSH_UNTIL_L2_TIMES = 4


def needs_flush(tiling: TilingData, soc: SocProfile | None = None) -> bool:
    """Whether a sample of ``tiling`` must start with an L2 flush to be cold: not where the launch's own
    footprint is far above the L2 (``FLUSH_UNTIL_L2_TIMES``)."""
    profile = soc or load_soc(tiling.soc)
    return bool(tiling.kernel.hbm_bytes(tiling.n) < FLUSH_UNTIL_L2_TIMES * profile.l2_bytes)


def race_samples(
    backend: Backend, tiling: TilingData, count: int, warmup: int, soc: SocProfile | None = None
) -> list[float]:
    """``count`` samples after ``warmup`` launches, each cold (flushed where that decides anything)."""
    flush = needs_flush(tiling, soc)
    for _ in range(warmup):
        backend.sample(tiling)
    out = []
    for _ in range(count):
        if flush:
            backend.flush_l2()
        out.append(backend.sample(tiling))
    return out


def measure(backend: Backend, tiling: TilingData, protocol: MeasurementProtocol) -> Measurement:
    """One measurement: a deterministic backend needs one sample; a timed one gets the protocol."""
    if backend.deterministic:
        us = backend.sample(tiling)
        return Measurement((us,), (us,), us, 0.0)
    return summarise(race_samples(backend, tiling, protocol.repeats, protocol.warmup), protocol.outlier_mads)


def remeasure_interleaved(
    backend: Backend, tilings: list[TilingData], protocol: MeasurementProtocol
) -> list[Measurement]:
    """Measure the candidates round-robin (so drift hits all alike), ``confirm_rounds`` x ``repeats`` each."""
    samples: list[list[float]] = [[] for _ in tilings]
    flush = [needs_flush(t) for t in tilings]
    for t in tilings:
        for _ in range(protocol.warmup):
            backend.sample(t)
    for _ in range(protocol.confirm_rounds):
        for _ in range(protocol.repeats):
            for i, t in enumerate(tilings):
                if flush[i]:
                    backend.flush_l2()
                samples[i].append(backend.sample(t))
    return [summarise(s, protocol.outlier_mads) for s in samples]


def median_standard_error(m: Measurement) -> float:
    """Of the median of the kept samples: 1.2533 x their robust sd (IQR / 1.349) over sqrt(n)."""
    n = len(m.kept)
    if n < 2:
        return float("inf")
    return 1.2533 * (m.iqr_us / 1.349) / math.sqrt(n)


def statistically_tied(a: Measurement, b: Measurement, z: float = 2.0) -> bool:
    """Tied when the medians differ by less than ``z`` standard errors of their difference (or by 0.1%):
    the spread of the median, not of the samples (an IQR tie called candidates 2-3% apart tied under 2%
    noise)."""
    gap = abs(a.median_us - b.median_us)
    return gap <= max(
        z * math.hypot(median_standard_error(a), median_standard_error(b)), 1e-3 * min(a.median_us, b.median_us)
    )

"""Measurement backends: one interface, so the search does not care what times a tiling.

A backend takes single samples (one timed launch each) and can flush L2 between them; the
measurement protocol (``tuner.protocol``) decides how many samples make a measurement. The
cost model is deterministic unless it is given synthetic noise (to exercise the protocol and the
search as a real, noisy device would). The CPU twin and NPU backends join with the kernel issue.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tiling_model import TilingData, predict


class MeasurementError(RuntimeError):
    """A launch failed or timed out: the trial fails with this reason and the sweep continues."""


class Backend(Protocol):
    name: str
    deterministic: bool  # one sample is the whole truth (no protocol needed)

    def sample(self, tiling: TilingData) -> float:
        """One timed launch of ``tiling``, in microseconds."""
        ...

    def flush_l2(self) -> None:
        """Evict L2 between samples so each one starts cold (a no-op where there is no cache)."""
        ...


class ModelBackend:
    """Times a tiling with ``tiling_model.predict``; ``noise`` adds lognormal relative noise and
    ``outlier_rate`` occasional 3x slow samples, both seeded for repeatable runs."""

    name = "model"

    def __init__(self, noise: float = 0.0, outlier_rate: float = 0.0, seed: int = 0) -> None:
        if noise < 0 or not 0 <= outlier_rate < 1:
            raise ValueError("noise must be >= 0 and outlier_rate in [0, 1)")
        self.noise = noise
        self.outlier_rate = outlier_rate
        self.deterministic = noise == 0 and outlier_rate == 0
        self._rng = np.random.default_rng(seed)

    def sample(self, tiling: TilingData) -> float:
        us = predict(tiling)
        if self.noise:
            us *= float(np.exp(self._rng.normal(0.0, self.noise)))
        if self.outlier_rate and self._rng.random() < self.outlier_rate:
            us *= 3.0
        return us

    def flush_l2(self) -> None:
        return None


BACKENDS: dict[str, type] = {"model": ModelBackend}


def make_backend(name: str, noise: float = 0.0, outlier_rate: float = 0.0, seed: int = 0) -> Backend:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; available here: {', '.join(BACKENDS)}")
    return ModelBackend(noise, outlier_rate, seed)

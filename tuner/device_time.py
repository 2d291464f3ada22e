"""Device time: what a sweep will spend on the device before it starts, and what it spent.

A sample costs the kernel's own time, the L2 flush before it where one decides anything (a 256 MiB
write, ``tuner.protocol.needs_flush``), and the host's launch and event synchronisation around it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tiling_model import SocProfile, TilingData, compute_tiling, load_soc
from tiling_model.space import score_space
from tuner.backends import Backend
from tuner.key import StudyKey
from tuner.protocol import MeasurementProtocol, needs_flush
from tuner.race import RacePlan
from tuner.trial_space import TrialSpace

FLUSH_BYTES = 256 * 2**20  # what NpuBackend writes to evict L2 (kernel.npu.L2_FLUSH_BYTES)
HOST_US = 40.0  # a launch and its event synchronisation on the host, per sample (torch_npu, measured order)


@dataclass(frozen=True)
class Estimate:
    keys: int
    samples: int
    seconds: float

    def text(self) -> str:
        return f"about {self.samples} samples, {_seconds(self.seconds)} of device time for {self.keys} keys"


def _seconds(s: float) -> str:
    """Seconds as a person reads them: 0.45 s, 12 s (not "0 s")."""
    return f"{s:.2g} s" if s < 10 else f"{s:.0f} s"


def flush_us(soc: SocProfile) -> float:
    return FLUSH_BYTES / (soc.hbm_gbps * 1e3)


def estimate(
    keys: list[StudyKey], trials: int, protocol: MeasurementProtocol, plan: RacePlan | None = None
) -> Estimate:
    """Samples and seconds a race sweep of ``keys`` takes at most: every trial's first measurement and
    warm-up, a race of its contenders to their cap with a warm-up each round (two for the keys a second look
    races again: the first ``plan.settled_keys``, as one worker sweeps them; workers racing side by side on
    one storage can each start a key before the shared model settles, up to one more due key per further
    worker, which this does not count), and the seed default's own
    measurement; each sample at the model's best time of its key plus the flush (where one is needed) and
    the host's overhead (the kernel time is the model's: a device slower than its model spends more)."""
    plan = plan or RacePlan()
    total_samples, total_us = 0, 0.0
    looks = plan.settled_keys if plan.second_look > 0 else 0  # the first keys of one worker's sweep
    for key in keys:
        soc = load_soc(key.soc)
        space = TrialSpace(soc, key.variant)
        scored = score_space(space.kernel, soc, key.size, top=1)
        i = scored.best_index()
        kernel_us = float(scored.result.predicted_us[i])
        t = compute_tiling([key.size], key.variant, scored.params(i), soc)
        per = kernel_us + HOST_US + (flush_us(soc) if needs_flush(t, soc) else 0.0)
        raced = plan.max_samples - plan.first_samples
        rounds = -(-raced // max(plan.round_samples, 1))
        samples = (
            trials * (plan.first_samples + protocol.warmup)  # each trial's first measurement
            + plan.contenders * (raced + rounds * protocol.warmup)  # the race to the cap, a warm-up per round
            + protocol.warmup
            + protocol.repeats  # the seed default's own measurement, where no trial had it
        )
        if looks > 0:  # a second look races its contenders again (its trials are the key's)
            looks -= 1
            samples += plan.contenders * (raced + rounds * protocol.warmup)
        total_samples += samples
        total_us += samples * per
    return Estimate(len(keys), total_samples, total_us / 1e6)


#: One refit of the sweep's learner on the host (``tuner.learning.Learner.fit_device``, after every key), as the
#: keys so far grow: about REFIT_S + REFIT_S_PER_KEY x keys, fitted on ``python benchmarks/learner_cost.py`` on the
#: 2-core VM of the benchmarks (0.44 s at 41 keys, 0.76 at 121, 1.31 at 481, 1.89 at 756; storage in memory), raised
#: by what the residual's choice of features added side by side (x1.11 / 1.36 / 1.15 / 1.22 at those counts).
REFIT_S = 0.40
REFIT_S_PER_KEY = 0.0025


#: A raced trial's time in the storage on PostgreSQL (a sweep's workers share one): its insert, the heartbeat
#: before it and its share of the reads, from ``python benchmarks/trial_writes.py --postgres URL`` on the 2-core
#: VM of the benchmarks (12 keys at 20 trials: 23.8 ms; 11.5 ms on a SQLite file, which one worker alone uses).
STORAGE_S_PER_TRIAL = 0.024


def refits_seconds(keys: int) -> float:
    """The host's seconds in the learner's refits over a sweep of ``keys`` keys (one after each; several workers
    share them, each refitting after its own keys)."""
    return sum(REFIT_S + REFIT_S_PER_KEY * k for k in range(1, keys + 1))


class DeviceClock:
    """A backend that counts what it costs: samples, flushes, kernel time, wall time (passes through)."""

    def __init__(self, backend: Backend) -> None:
        self.inner = backend
        self.name = backend.name
        self.deterministic = backend.deterministic
        self.runs_kernel = backend.runs_kernel
        self.samples = 0
        self.flushes = 0
        self.kernel_us = 0.0
        self.wall_s = 0.0

    def sample(self, tiling: TilingData) -> float:
        start = time.perf_counter()
        try:
            us = self.inner.sample(tiling)
        finally:
            self.wall_s += time.perf_counter() - start
        self.samples += 1
        self.kernel_us += us
        return us

    def flush_l2(self) -> None:
        start = time.perf_counter()
        try:
            self.inner.flush_l2()
        finally:
            self.wall_s += time.perf_counter() - start
        self.flushes += 1

    def device_seconds(self, soc: SocProfile) -> float:
        """The device time the samples took as a device would spend it (kernel + flushes + host overhead)."""
        return (self.kernel_us + self.flushes * flush_us(soc) + self.samples * HOST_US) / 1e6

    def text(self, soc: SocProfile) -> str:
        kernel = f"{self.kernel_us / 1e6:.2f} s in the kernel"
        device = f"{self.device_seconds(soc):.1f} s of device time"
        return f"{self.samples} samples ({self.flushes} after a flush), {kernel}, {device}, {self.wall_s:.1f} s wall"

"""What a device sweep's learner costs the host: one refit (``tuner.learning.Learner.fit_device``, run after every
key) as the sweep grows, beside the device time ``python -m tuner doctor --plan`` estimates.

A storage is filled with ``--keys`` keys of the 910B2 sweep as a race leaves them (each key's study, its key
attributes, ``--trials`` measured configurations of the key's space with their samples' median on the
``realised:3`` stand-in device), without racing them: the refit is what is timed, not the search. Then, at each
count of ``--at``, one refit with the keys so far: the first read of the storage (``cold``, what a worker
starting on a filled storage pays once) and the refit after one more key (``warm``, what every key pays: its
study read again, the hardware fit on at most 900 cases, the residual on every case), each split into reading,
the device fit and the rest. ``--storage`` takes an Optuna RDB URL (a new SQLite file: filling it costs what
``benchmarks/trial_writes.py`` measures) in place of the in-memory storage.

Run: ``.venv/bin/python benchmarks/learner_cost.py`` (about 3 minutes; ``--at 40,120,480,755``: the last refit of
a sweep of the 756 keys the benchmarks draw from, the 910B2 grid without the fused mode).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import optuna
from search_efficiency import pick_keys

from model_tools import calibrate
from tiling_model import compute_tiling, load_soc
from tiling_model.kernels import bce_grad_kernel
from tiling_model.space import score_space
from tiling_model.tiling import KNOB_NAMES
from tuner import learning
from tuner.key import StudyKey
from tuner.learning import Learner, key_attrs
from tuner.protocol import MeasurementProtocol, summarise
from tuner.synthetic import SyntheticDevice
from tuner.trial_attrs import trial_attrs

SOC = "Ascend910B2"
BACKEND = "synthetic"


def add_key(storage: optuna.storages.BaseStorage, key: StudyKey, device: SyntheticDevice, trials: int,
            rng: np.random.Generator) -> None:  # fmt: skip
    """One key's study as a race leaves it: ``trials`` configurations, each with 5 noisy samples and their median."""
    kernel = bce_grad_kernel(key.variant, classes=1)
    scored = score_space(kernel, device.soc, key.size)
    study = optuna.create_study(storage=storage, study_name=key.study_name(BACKEND))
    study.set_user_attr("key", key_attrs(key))
    dist = {"i": optuna.distributions.IntDistribution(0, len(scored.block_bytes) - 1)}
    race: dict[str, list[float]] = {}
    for i in rng.choice(len(scored.block_bytes), size=min(trials, len(scored.block_bytes)), replace=False):
        params = scored.params(int(i))
        truth = device.truth_us(compute_tiling([key.size], key.variant, params, device.soc))
        samples = [truth * float(np.exp(rng.normal(0.0, 0.02))) for _ in range(5)]
        knobs = tuple(int(getattr(params, k)) for k in KNOB_NAMES)
        race["/".join(str(v) for v in knobs)] = samples
        m = summarise(samples, MeasurementProtocol().outlier_mads)
        attrs = trial_attrs(knobs, m, truth, truth)  # (the predictions: unread by the refit)
        study.add_trial(optuna.trial.create_trial(params={"i": int(i)}, distributions=dist, value=m.median_us,
                                                  user_attrs=attrs))  # fmt: skip
    study.set_user_attr("race", race)


class Split:
    """Seconds spent in the learner's reading and device fit during one refit (wrapping the two in place)."""

    def __init__(self) -> None:
        self.read = self.fit = 0.0
        stored_read, fit_device = learning.StoredMeasurements.read, calibrate.fit_device

        def timed_read(this: learning.StoredMeasurements) -> list[calibrate.Measured]:
            t0 = time.perf_counter()
            try:
                return stored_read(this)
            finally:
                self.read += time.perf_counter() - t0

        def timed_fit(*args: object, **kwargs: object) -> calibrate.DeviceFit:
            t0 = time.perf_counter()
            try:
                return fit_device(*args, **kwargs)  # type: ignore[arg-type]
            finally:
                self.fit += time.perf_counter() - t0

        learning.StoredMeasurements.read = timed_read  # type: ignore[method-assign]
        learning.fit_device = timed_fit  # type: ignore[assignment]

    def refit(self, learner: Learner) -> tuple[float, float, float]:
        """(total, reading, device fit) seconds of one refit."""
        self.read = self.fit = 0.0
        t0 = time.perf_counter()
        learner.fit_device()
        return time.perf_counter() - t0, self.read, self.fit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--at", default="40,120,480,755", help="key counts at which a refit is timed")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--storage", default="", help="an Optuna RDB URL (default: in memory)")
    a = ap.parse_args()
    try:
        at = sorted({int(x) for x in a.at.split(",")})
    except ValueError:
        ap.error(f"--at takes key counts separated by commas, not {a.at!r}")
    if not at or at[0] < 2 or a.trials < 5:
        ap.error("--at needs counts of 2 keys or more, --trials 5 or more")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    soc = load_soc(SOC)
    device = SyntheticDevice(soc, 3, shape="realised")
    storage = optuna.storages.RDBStorage(a.storage) if a.storage else optuna.storages.InMemoryStorage()
    keys = pick_keys(at[-1] + 1)
    if len(keys) <= at[-1]:
        ap.error(f"the {SOC} sweep has {len(keys)} keys: --at counts up to {len(keys) - 1} (one more is added)")
    rng = np.random.default_rng(0)
    split = Split()
    print(f"one refit of the learner ({a.trials} measured configurations a key; storage: {a.storage or 'in memory'})")
    print(f"  {'keys':>5} {'cases':>6} {'cold s':>7} {'warm s':>7} {'reading':>8} {'device fit':>11} {'fill s':>7}")
    done = 0
    for count in at:
        t0 = time.perf_counter()
        for key in keys[done:count]:
            add_key(storage, key, device, a.trials, rng)
        fill = time.perf_counter() - t0
        done = count
        learner = Learner(soc, storage, BACKEND)
        cold, _, _ = split.refit(learner)
        add_key(storage, keys[done], device, a.trials, rng)  # the next key's study, as a sweep's refit finds it
        done += 1
        warm, read, fit = split.refit(learner)
        cases = len(learner.model().fit.cases) if learner.model().fit else 0
        print(
            f"  {count + 1:>5} {cases:>6} {cold:>7.2f} {warm:>7.2f} {read:>8.2f} {fit:>11.2f} {fill:>7.1f}", flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the race's early stop (``tuner sweep --stop-early``) saves and costs, on stand-in devices.

For each stand-in device and noise replicate, the same keys are swept twice as ``benchmarks/search_efficiency.py``
sweeps them (the device loop: ``tuner.study.tune`` with the learner, in the sweep's order): every trial of each
key spent (the default), and with ``RacePlan(stop_early=True)``. True regret of each key's pick over the device's
exhaustive optimum, trials and samples per key, side by side.

Run: ``.venv/bin/python benchmarks/early_stop.py`` (``--devices knob:7,realised:3,realised:11 --replicates 3``;
``--devices knob:1,knob:2,realised:1,realised:2,realised:5 --replicates 2`` are devices the stop's parameters were
not chosen on); two processes, about 45 s per device, plan and replicate.
"""

from __future__ import annotations

import argparse
import sys
import time
from multiprocessing import Pool

import numpy as np
import optuna
from search_efficiency import pick_keys, stand_in_devices

from tiling_model import load_soc
from tuner.learning import Learner
from tuner.race import RacePlan
from tuner.study import tune
from tuner.synthetic import SyntheticBackend, SyntheticDevice

SOC = "Ascend910B2"
PLANS = {"every trial": RacePlan(), "stop early": RacePlan(stop_early=True)}


def sweep(job: tuple[str, int, str, int, int, int]) -> tuple[list[float], list[int], list[int]]:
    """One device loop over the keys: each key's true regret, trials and samples."""
    shape, seed, plan, budget, replicate, keys = job
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = SyntheticDevice(load_soc(SOC), seed, shape=shape)
    backend = SyntheticBackend(device, seed=1000 * replicate + budget)
    storage = optuna.storages.InMemoryStorage()
    learner = Learner(device.soc, storage, backend.name)
    regrets, trials, samples = [], [], []
    for key in pick_keys(keys):
        before = backend.samples
        e = tune(key, backend, storage, budget, model=learner.model(), strategy="race", plan=PLANS[plan])
        learner.study_done()
        best, _ = device.optimum(key.variant, key.size)
        regrets.append(device.true_us(key.variant, key.size, e.tiling_params()) / best - 1.0)
        trials.append(e.trials)
        samples.append(backend.samples - before)
    return regrets, trials, samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="knob:7,realised:3,realised:11", help="shape:seed,...")
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--keys", type=int, default=30)
    a = ap.parse_args()
    devices = stand_in_devices(a.devices, ap)
    start = time.monotonic()
    jobs = [(s, d, p, a.budget, r, a.keys) for s, d in devices for p in PLANS for r in range(a.replicates)]
    with Pool(2) as pool:
        results = pool.map(sweep, jobs)
    print(f"{a.keys} keys of the {SOC} sweep at {a.budget} trials, {a.replicates} noise replicates per device; true "
          "regret of each key's pick over its device's optimum")  # fmt: skip
    print(f"  {'device':<12}{'plan':<13}{'median':>8}{'<=1%':>7}{'<=2%':>7}{'trials':>8}{'samples':>9}")
    for s, d in devices:
        for p in PLANS:
            got = [res for job, res in zip(jobs, results, strict=True) if job[:3] == (s, d, p)]
            reg = np.concatenate([np.asarray(g[0]) for g in got])
            trials = np.concatenate([np.asarray(g[1]) for g in got])
            samples = np.concatenate([np.asarray(g[2]) for g in got])
            print(f"  {f'{s}:{d}':<12}{p:<13}{100 * np.median(reg):>7.2f}%{100 * np.mean(reg <= 0.01):>6.0f}%"
                  f"{100 * np.mean(reg <= 0.02):>6.0f}%{trials.mean():>8.1f}{samples.mean():>9.0f}")  # fmt: skip
    print(f"({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the sweep's second look (``tuner sweep --second-look K``, ``tuner.study.look_again``) buys, on stand-ins.

For each stand-in device and noise replicate, the same keys are swept as ``tuner.sweep.run_sweep`` sweeps them (the
device loop: ``tuner.study.tune`` with the learner, in the sweep's order, without the CPU-twin gate), with each plan:
``one race`` (``RacePlan(second_look=0)``: every key spends its trials in one race) and ``second look`` (the
default: a key raced on a device model fitted on fewer than ``RacePlan.settled_keys`` keys races ``K`` trials fewer
and gets them back once every key is done, raced on the whole sweep's model, its first race's measurements
kept). The trials per key are the same both ways; the samples are not (a second look races its contenders
again): both are printed. True regret of each key's final pick over the device's
exhaustive optimum, overall and for the first ``settled_keys`` keys of the sweep (the keys a second look is for).
A plan's rows depend only on the device, budget and replicate: ``--plans`` runs one of them alone.

Run: ``.venv/bin/python benchmarks/second_look.py`` (``--devices knob:7,realised:3,realised:11 --replicates 2
--budgets 20,12 --plans "one race,second look"``); two processes, about 45 s per device, plan, budget and
replicate.
"""

from __future__ import annotations

import argparse
import sys
import time
from multiprocessing import Pool

import numpy as np
import optuna
from search_efficiency import pick_keys, run, stand_in_devices

from tiling_model import load_soc
from tuner.race import RacePlan
from tuner.synthetic import SyntheticDevice

SOC = "Ascend910B2"
PLANS = {"one race": RacePlan(second_look=0), "second look": RacePlan()}


def sweep(job: tuple[str, int, str, int, int, int]) -> tuple[list[float], list[int], list[int]]:
    """One device loop over the keys, as run_sweep races them (search_efficiency.run): each key's true regret,
    trials and samples."""
    shape, seed, plan_name, budget, replicate, count = job
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = SyntheticDevice(load_soc(SOC), seed, shape=shape)
    out = run("device loop", pick_keys(count), device, budget, replicate, plan=PLANS[plan_name])
    return out["regret"], out["trials"], out["samples"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="knob:7,realised:3,realised:11", help="shape:seed,...")
    ap.add_argument("--replicates", type=int, default=2)
    ap.add_argument("--budgets", default="20,12", help="trials per key, comma-separated")
    ap.add_argument("--keys", type=int, default=30)
    ap.add_argument("--plans", default=",".join(PLANS), help=f"of {', '.join(PLANS)} (comma-separated)")
    a = ap.parse_args()
    plans = [p for p in a.plans.split(",") if p]
    if not plans or any(p not in PLANS for p in plans):
        ap.error(f"--plans: each of {', '.join(PLANS)}")
    devices = stand_in_devices(a.devices, ap)
    budgets = [int(b) for b in a.budgets.split(",")]
    first = RacePlan().settled_keys
    start = time.monotonic()
    jobs = [(s, d, p, b, r, a.keys) for s, d in devices for b in budgets for p in plans for r in range(a.replicates)]
    with Pool(2) as pool:
        results = pool.map(sweep, jobs)
    print(f"{a.keys} keys of the {SOC} sweep, {a.replicates} noise replicates per device; true regret of each key's "
          f"pick over its device's optimum (first {first}: the sweep's first {first} keys)")  # fmt: skip
    head = f"  {'device':<12}{'budget':>7} {'plan':<12}{'median':>8}{'<=1%':>7}{'<=2%':>7}{'first <=2%':>12}"
    print(head + f"{'trials':>8}{'samples':>9}")
    for b in budgets:
        for s, d in [*devices, ("all", -1)]:
            for p in plans:
                got = [res for job, res in zip(jobs, results, strict=True) if job[2:4] == (p, b)
                       and (s == "all" or job[:2] == (s, d))]  # fmt: skip
                reg = np.array([g[0] for g in got])
                trials = np.concatenate([np.asarray(g[1]) for g in got])
                samples = np.concatenate([np.asarray(g[2]) for g in got])
                name = "all" if s == "all" else f"{s}:{d}"
                print(f"  {name:<12}{b:>7} {p:<12}{100 * np.median(reg):>7.2f}%{100 * np.mean(reg <= 0.01):>6.1f}%"
                      f"{100 * np.mean(reg <= 0.02):>6.1f}%{100 * np.mean(reg[:, :first] <= 0.02):>11.1f}%"
                      f"{trials.mean():>8.1f}{samples.mean():>9.0f}")  # fmt: skip
    print(f"({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

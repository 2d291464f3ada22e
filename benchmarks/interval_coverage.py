"""Do the intervals answers carry hold what they claim? Coverage on stand-in devices, at sizes and for
variants a sweep never timed.

For each stand-in device (``tuner.synthetic.SyntheticDevice``, five seeds) a sweep of K keys (the device
loop at 20 trials, as ``bench-search`` runs it) ends as the table would: its learner fits the device with
folds (``Learner.fit_device(folds=5)``) and the profile the table carries is read back from its document
(what ``POST /tiling`` uses). Then, as the service answers them:
- **untimed sizes**: two per key (x0.61 and x1.37 of its size), re-fitted in the key's bucket;
- **untuned variants**: 30 calls of variants the sweep did not measure, at log-uniform sizes, the model's
  best under the fitted profile;
each answer's interval is checked against the device's noise-free time of the tiling answered. The
claimed rate is 80% (the 10th to 90th percentile of held-out ratios). Every answer carries an interval by
construction (``tiling_model.confidence``); the table counts the ones that would have had none before
(a device fit of fewer than 10 keys, or no held-out case of the class).

Run: ``python benchmarks/interval_coverage.py`` (``--keys 4,30 --seeds 1,2,3,4,5``; about 5 minutes).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import numpy as np
import optuna

from tiling_model import SocProfile, Variant, load_soc, predict
from tiling_model.confidence import interval
from tiling_model.pick import model_best, refit_tiling
from tiling_model.soc import profile_from_json
from tiling_model.tiling import TilingParams
from tuner.learning import Learner, device_profile_document
from tuner.study import tune
from tuner.sweep import sweep_keys
from tuner.synthetic import SyntheticBackend, SyntheticDevice

SOC = "Ascend910B2"
SIZES = tuple(4**k for k in range(5, 14))  # 1 Ki .. 64 Mi
BUDGET = 20


def every_key() -> list:
    return sweep_keys(SOC, ("float32", "float16", "bfloat16", "int32", "int16"), ("none", "sum", "mean"),
                      ("full", "none"), SIZES, ("none", "full", "last_dim"), ("logit", "probability"))  # fmt: skip


def sweep(device: SyntheticDevice, keys: list, seed: int) -> tuple[list, SocProfile]:
    """The device loop over ``keys``; the entries and the profile the table carries."""
    backend = SyntheticBackend(device, seed=seed)
    storage = optuna.storages.InMemoryStorage()
    learner = Learner(device.soc, storage, backend.name)
    entries = []
    for key in keys:
        entries.append(tune(key, backend, storage, BUDGET, model=learner.model(), strategy="race"))
        learner.study_done()
    doc = device_profile_document(learner.fit_device(folds=5))
    profile = profile_from_json(doc["profile"]) if doc else device.soc
    return entries, profile


def check(
    device: SyntheticDevice, profile: SocProfile, v: Variant, n: int, params: TilingParams | None
) -> tuple[bool, str]:
    """Whether the answer's interval holds the device's time; the answer's basis."""
    if params is not None:
        t = refit_tiling([n], v, profile, params)
    else:
        t = model_best(n, v, profile)
    assert t is not None
    us = predict(t, profile)
    band = interval(t, profile, us)
    truth = device.truth_us(t)
    return band.lo_us <= truth <= band.hi_us, band.basis


def bases(rows: list[tuple[bool, str]]) -> str:
    """How many answers took each kind of band."""

    def kind(b: str) -> str:
        base = ("shipped+in-sample" if "in-sample" in b else "few keys+overall" if "held-out range joined" in b
                else "overall+shipped" if "too few" in b else "own class")  # fmt: skip
        return base + (" (+measured variants')" if "never narrower than theirs" in b else "")

    kinds = Counter(kind(b) for _, b in rows)
    return ", ".join(f"{k} {v}" for k, v in kinds.most_common())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", default="4,30")
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--untuned", type=int, default=30)
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.monotonic()
    pool = every_key()
    print(f"{SOC} stand-in devices, sweeps at {BUDGET} trials; share of answers whose interval holds the device's "
          "noise-free time (claimed: 80%)")  # fmt: skip
    print(f"  {'keys':>4} {'seed':>4}  {'untimed sizes':>14} {'untuned variants':>17}  bases (untimed / untuned)")
    totals: dict[int, list[list[bool]]] = {}
    for count in (int(k) for k in a.keys.split(",")):
        for seed in (int(s) for s in a.seeds.split(",")):
            rng = np.random.default_rng(100 * count + seed)
            keys = [pool[i] for i in sorted(rng.choice(len(pool), size=count, replace=False))]
            device = SyntheticDevice(load_soc(SOC), seed)
            entries, profile = sweep(device, keys, seed)
            sized = [check(device, profile, k.variant, int(k.size * f), TilingParams(**e.params))
                     for k, e in zip(keys, entries, strict=True) for f in (0.61, 1.37)]  # fmt: skip
            measured = {k.variant.label() for k in keys}
            others = [k for k in pool if k.variant.label() not in measured]
            picks = [others[i] for i in rng.choice(len(others), size=a.untuned, replace=False)]
            sizes = np.exp(rng.uniform(np.log(1024), np.log(1 << 26), size=len(picks))).astype(int)
            untuned = [check(device, profile, k.variant, int(n), None) for k, n in zip(picks, sizes, strict=True)]
            got = totals.setdefault(count, [[], []])
            got[0] += [h for h, _ in sized]
            got[1] += [h for h, _ in untuned]

            held = (100 * np.mean([h for h, _ in sized]), 100 * np.mean([h for h, _ in untuned]))
            print(f"  {count:>4} {seed:>4}  {held[0]:>13.0f}% {held[1]:>16.0f}%  {bases(sized)} / {bases(untuned)}",
                  flush=True)  # fmt: skip
    for count, (sized_all, untuned_all) in totals.items():
        print(f"  {count:>4}  all  {100 * np.mean(sized_all):>13.0f}% {100 * np.mean(untuned_all):>16.0f}%  "
              f"({len(sized_all)} and {len(untuned_all)} answers, none without an interval)")  # fmt: skip
    print(f"({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Search efficiency on one stand-in device: the current search (model-seeded TPE) beside the device
loop (the race on a model that learns the device across keys), as a sweep runs them.

The truth is ``tuner.synthetic.SyntheticDevice``: one device whose hardware is off its profile in a way
every key shares, effects by block size, BUFFER_NUM, tile size and alignment and core count shared by
every size, per-configuration effects, 2% noise and 3% outlier samples. It is bcetune's own truth (the
issue's figures are also judged against one written elsewhere). Each strategy tunes the same keys in the
sweep's order, ``tuner.study.tune`` per key as ``run_sweep`` calls it (the device loop with its learner,
then its second look at the keys raced before the model settled: ``tuner.study.look_again``);
true regret is the chosen configuration's noise-free time over the key's exhaustive optimum. Then the
re-fit at sizes no key was tuned at (what the service and the build do between entries), with the
profile the sweep fitted and with the shipped one.

Run: ``make bench-search`` (``--keys``, ``--replicates``, ``--budgets``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import optuna

from tiling_model import TilingParams, load_soc
from tiling_model.pick import refit
from tiling_model.space import score_space
from tuner.explore import choose
from tuner.key import StudyKey
from tuner.learning import Learner, measurements
from tuner.race import RacePlan
from tuner.study import look_again, look_due, tune
from tuner.sweep import sweep_keys
from tuner.synthetic import DEVICE_SHAPES, SyntheticBackend, SyntheticDevice
from tuner.trial_space import TrialSpace

SOC = "Ascend910B2"
SIZES = tuple(4**k for k in range(5, 14))  # 1 Ki .. 64 Mi


def stand_in_devices(text: str, ap: argparse.ArgumentParser) -> list[tuple[str, int]]:
    """``--devices shape:seed,...`` as (shape, seed) pairs (tuner.synthetic); a bad one is the parser's error."""
    out = []
    for spec in text.split(","):
        shape, _, seed = spec.partition(":")
        if shape not in DEVICE_SHAPES or not seed.isdigit():
            ap.error(f"--devices: {spec!r} is not shape:seed with a shape of {', '.join(DEVICE_SHAPES)}")
        out.append((shape, int(seed)))
    return out


def pick_keys(count: int, seed: int = 2026) -> list[StudyKey]:
    """``count`` keys of the 910B2 sweep (every dtype, reduction, weight, pos_weight, wrt; 1 Ki to 64 Mi), in
    the sweep's order."""
    every = sweep_keys(SOC, ("float32", "float16", "bfloat16", "int32", "int16"), ("none", "sum", "mean"),
                       ("full", "none"), SIZES, ("none", "full", "last_dim"), ("logit", "probability"))  # fmt: skip
    rng = np.random.default_rng(seed)
    idx = sorted(rng.choice(len(every), size=min(count, len(every)), replace=False))
    return [every[i] for i in idx]


def run(strategy: str, keys: list[StudyKey], device: SyntheticDevice, budget: int, replicate: int,
        explore: int = 0, plan: RacePlan | None = None) -> dict:  # fmt: skip
    """Tune the keys in order on the device (the device loop with ``plan``, the race's default without); with
    ``explore`` (device loop only), then that many sizes between them that teach most (``tuner.explore``), at
    the same budget each. Regrets are the keys'."""
    backend = SyntheticBackend(device, seed=1000 * replicate + budget)
    storage = optuna.storages.InMemoryStorage()
    learner = Learner(device.soc, storage, backend.name) if strategy == "device loop" else None
    regrets, samples, trials, entries = [], [], [], []

    def look() -> None:  # run_sweep's second look: the keys raced before the model settled, on it now
        assert learner is not None
        for i, key in enumerate(keys):
            before = backend.samples
            looked = look_again(key, backend, storage, budget, learner.model(), plan=plan)
            if looked is not None and looked != entries[i]:
                learner.study_done()
                entries[i] = looked
            samples[i] += backend.samples - before

    for key in keys:
        before = backend.samples
        kept = look_due(learner.model(), plan) if learner else 0  # (kept for the second look, as run_sweep does)
        e = tune(key, backend, storage, budget - kept, model=learner.model() if learner else None,
                 strategy="race" if learner else "tpe", plan=plan)  # fmt: skip
        if learner:
            learner.study_done()
        samples.append(backend.samples - before)
        entries.append(e)
    if learner:
        look()
    for key, e in zip(keys, entries, strict=True):
        best, _ = device.optimum(key.variant, key.size)
        regrets.append(device.true_us(key.variant, key.size, e.tiling_params()) / best - 1.0)
        trials.append(e.trials)
    explored: list[StudyKey] = []
    if explore and learner:
        cases = measurements(storage, device.soc, backend.name)
        explored = [c.key for c in choose(keys, cases, learner.model().profile, explore, budget)]
        for key in explored:
            before = backend.samples
            tune(key, backend, storage, budget, model=learner.model(), strategy="race")
            learner.study_done()
            samples.append(backend.samples - before)
    return {"regret": regrets, "samples": samples, "trials": trials, "learner": learner, "entries": entries,
            "explored": explored}  # fmt: skip


def model_best(keys: list[StudyKey], device: SyntheticDevice) -> list[float]:
    """The shipped model's best, no trial: its true regret per key."""
    out = []
    for key in keys:
        scored = score_space(TrialSpace(device.soc, key.variant).kernel, device.soc, key.size)
        best, _ = device.optimum(key.variant, key.size)
        out.append(device.true_us(key.variant, key.size, scored.params(scored.best_index())) / best - 1.0)
    return out


def refit_regret(
    keys: list[StudyKey],
    entries: list,
    device: SyntheticDevice,
    profile_of: dict[str, object],
    rng: np.random.Generator,
) -> dict[str, list[float]]:
    """True regret of the re-fit at unseen sizes in each key's bucket (two per key, log-uniform around its
    size), keeping the tuned entry's BUFFER_NUM as the service does, with each profile."""
    out: dict[str, list[float]] = {name: [] for name in profile_of}
    for key, entry in zip(keys, entries, strict=True):
        for _ in range(2):
            n = int(key.size * np.exp(rng.uniform(-0.69, 0.69)))
            best, _ = device.optimum(key.variant, n)
            bucket = TilingParams(**entry.params)
            for name, profile in profile_of.items():
                p = refit(n, key.variant, profile, bucket)  # type: ignore[arg-type]
                out[name].append(device.true_us(key.variant, n, p) / best - 1.0)
    return out


def row(label: str, regrets: list[float], samples: list[int] | None = None, trials: list[int] | None = None) -> str:
    r = np.asarray(regrets)
    extra = f"{statistics.mean(samples):>9.0f}" if samples else f"{'-':>9}"
    extra += f"{statistics.mean(trials):>8.1f}" if trials else f"{'-':>8}"
    return (f"  {label:<34}{100 * np.median(r):>8.2f}%{100 * np.percentile(r, 90):>8.2f}%{100 * r.max():>8.2f}%"
            f"{100 * np.mean(r <= 0.01):>8.0f}%{100 * np.mean(r <= 0.02):>8.0f}%{extra}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=30)
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--budgets", default="12,20,40,80")
    ap.add_argument("--device-seed", type=int, default=7)
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    keys = pick_keys(a.keys)
    device = SyntheticDevice(load_soc(SOC), a.device_seed)
    budgets = [int(b) for b in a.budgets.split(",")]
    start = time.monotonic()
    print(f"{len(keys)} keys of the {SOC} sweep (1 Ki to 64 Mi elements), stand-in device {a.device_seed}, "
          f"{a.replicates} noise replicates; true regret of each key's pick over its exhaustive optimum")  # fmt: skip
    header = f"  {'per key':<34}{'median':>9}{'p90':>9}{'worst':>9}{'<=1%':>9}{'<=2%':>9}{'samples':>9}{'trials':>8}"
    print(header)
    print(row("the model's best, no trial", model_best(keys, device)))
    last_learner, last_entries = None, []
    for budget in budgets:
        for strategy in ("current (model-seeded TPE)", "device loop"):
            runs = [run("device loop" if strategy == "device loop" else "tpe", keys, device, budget, r)
                    for r in range(a.replicates)]  # fmt: skip
            regrets = [x for r in runs for x in r["regret"]]
            samples = [x for r in runs for x in r["samples"]]
            trials = [x for r in runs for x in r["trials"]]
            print(row(f"{strategy}, {budget} trials", regrets, samples, trials), flush=True)
            if strategy == "device loop" and budget == 20:
                last_learner, last_entries = runs[0]["learner"], runs[0]["entries"]
                first, later = runs[0]["trials"][:10], runs[0]["trials"][-10:]
                early, late = statistics.mean(first), statistics.mean(later)
                print(f"    trials per key, first 10 keys {early:.1f}, last 10 {late:.1f}")
    if last_learner is not None and last_learner.model().fitted:
        model = last_learner.fit_device(folds=5)
        fit = model.fit.summary() if model.fit else {}
        print(f"fitted on the 20-trial sweep: {fit.get('fitted')}; knob correction {fit.get('knob_correction')}; "
              f"held-out median |error| {100 * fit.get('held_out_median', float('nan')):.1f}% "
              f"(shipped profile: {100 * fit.get('median_before', float('nan')):.1f}%)")  # fmt: skip
        hw = device.hardware
        print(f"device: hbm_gbps {hw.hbm_gbps:.1f}, launch_us {hw.launch_us:.3f}, core_start_us {hw.core_start_us:.3f}")
        profiles = {"shipped profile": device.soc, "the sweep's fitted profile": model.profile}
        rr = refit_regret(keys, last_entries, device, profiles, np.random.default_rng(5))
        print("re-fit at unseen sizes (two per key), true regret:")
        print(header)
        for name, regrets in rr.items():
            print(row(name, regrets))
    print(f"({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

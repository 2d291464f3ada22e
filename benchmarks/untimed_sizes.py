"""Sizes a sweep never timed: how close the re-fit gets there to the device's best, on stand-in devices
shaped like our knob correction and on ones that are not.

For each stand-in device (``tuner.synthetic.SyntheticDevice``: ``knob`` effects by block, BUFFER_NUM, tile,
alignment and core count, the shape of our correction; ``realised`` effects of what the knobs make of a
size: a copy's bytes against the buffer count, the last copy's alignment, core boundaries, tiles per core
against the buffer count, an odd core count; ``crossed`` effects of the realised tiling in classes the
residual's features keep apart, written after they were fixed: a check out of their shape), a device-loop sweep
of ``--keys`` keys at ``--trials`` trials (``tuner.study.tune`` with the learner, as ``run_sweep`` runs it).
Then ``--judged`` of its keys,
each at two sizes it never timed (x0.61 and x1.37), true regret over the exhaustive optimum of:

- the shipped model's re-fit (the bucket's BUFFER_NUM kept: what the service and the build do with the
  shipped tables);
- the sweep's fitted profile without its residual (hardware and knob correction) in the service's re-fit
  (``pick.refit``: a fitted profile's re-fit searches every buffer count);
- the fitted profile as the table carries it (the hardware, and the learned residual over the realised
  tiling in the knob correction's place where held-out keys say so: ``tiling_model.residual``), re-fit
  keeping the bucket's BUFFER_NUM: what the service and the build answered before they searched every
  buffer count;
- that profile in ``pick.refit`` (every buffer count): what the service and the build answer now;
- the fitted hardware and correction with a residual fitted on top of the correction, whole space (the
  alternative not taken);
- the hardware with a residual fitted on the sweep's own configurations at the device's noise-free times of
  its shared effects (no sample noise, outliers or per-configuration part), whole space: what the features
  learn from those configurations once the measurements' noise is gone;
- the floor: a model that knows every effect the device shares across sizes (all but the
  per-configuration part), whole space.

Last, what one re-fit costs (the engine called from Python, the same sizes, side by side): the fitted
profile without the residual keeping the bucket's buffer count, and what ships (the residual, every buffer
count, each bounded by the best of those before it): its floors carry the residual's least over each
range, so it predicts more.

The residual is fitted on every measurement of the sweep; where its held-out check fails it is 1.
Configurations are scored without the validation the service adds (the truth times any of them).

Run: ``make bench-search`` (or ``.venv/bin/python benchmarks/untimed_sizes.py``; ``--devices`` defaults to
knob:7,realised:3,realised:11,crossed:1); minutes per device. ``--replicate R`` runs the same sweep on another
draw of the device's sample noise (the device, its keys and the judged sizes unchanged): 60 sizes judge a share
within 2% to about 6 points, so one draw says little about a device.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import numpy as np
import optuna
from search_efficiency import pick_keys, run, stand_in_devices

from model_tools.calibrate import Measured, case_levels, device_residual
from tiling_model import TilingParams, Variant, engine, load_soc, predict
from tiling_model.correction import IDENTITY
from tiling_model.kernels import bce_grad_kernel
from tiling_model.pick import refit
from tiling_model.residual import NONE, Residual, fit_residual
from tiling_model.soc import SocProfile, rehashed
from tiling_model.space import BLOCK_CHOICES, score_space, tile_choices
from tiling_model.tiling import KNOB_NAMES
from tuner.explore import shared_trials
from tuner.learning import measurements
from tuner.synthetic import SyntheticDevice

SOC = "Ascend910B2"
FACTORS = (0.61, 1.37)


def noise_free_residual(cases: list[Measured], hardware: SocProfile, device: SyntheticDevice) -> Residual:
    """The residual fitted on the sweep's own configurations (``cases``), each at the device's time of its shared
    effects (no sample noise, no outliers, no per-configuration part): what the features learn from those
    configurations with the measurements' noise taken away (the rest of the gap to the floor is theirs)."""
    true_hardware = device.hardware
    logs = []
    for m in cases:
        t = m.launches[0]
        knobs = [np.array([int(getattr(t.params, k))]) for k in KNOB_NAMES]
        shared = float(device.effects(*knobs, 0, t.n, t.elem_bytes, shared_only=True)[0])
        logs.append(float(np.log(predict(t, true_hardware) * shared / predict(t, hardware))))
    return fit_residual(case_levels(cases), [m.key for m in cases], logs)


def whole_space_pick(variant: Variant, n: int, profile: SocProfile) -> TilingParams:
    """The profile's best over the whole space (every buffer count), as the engine predicts it."""
    scored = score_space(bce_grad_kernel(variant, classes=1), profile, n)
    return scored.params(scored.best_index())


def bucket_refit(variant: Variant, n: int, profile: SocProfile, bucket: TilingParams) -> TilingParams:
    """The profile's best at n of the bucket's buffer count only (the re-fit before it searched every one)."""
    kernel = bce_grad_kernel(variant, classes=1)
    bn = int(bucket.buffer_num or 2)
    c = engine.refit(kernel, profile, n, BLOCK_CHOICES, bn, int(tile_choices(kernel, profile, bn)[-1]))
    return TilingParams(c.block_bytes, bn, c.tile_bytes, c.core_num)


def refit_us(variant: Variant, n: int, profile: SocProfile, bucket: TilingParams, every: bool) -> float:
    """Microseconds of one engine re-fit at n (best of 3; the Python call included): of the bucket's buffer
    count, or of every one, the bucket's first (``every``: what the service and the build spend on an
    untimed size of a device's table)."""
    kernel = bce_grad_kernel(variant, classes=1)
    bn = int(bucket.buffer_num or 2)
    slices = [(b, int(t[-1])) for b in kernel.allowed_buffer_nums() if (t := tile_choices(kernel, profile, b)).size]
    slices.sort(key=lambda s: s[0] != bn)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        if every:
            engine.refit_across(kernel, profile, n, BLOCK_CHOICES, slices)
        else:
            engine.refit(kernel, profile, n, BLOCK_CHOICES, bn, slices[0][1])
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def judge(
    shape: str, seed: int, keys_count: int, trials: int, judged: int, explore: int = 0, replicate: int = 0
) -> None:
    device = SyntheticDevice(load_soc(SOC), seed, shape=shape)
    keys = pick_keys(keys_count)
    start = time.monotonic()
    each = shared_trials(trials, len(keys), explore)  # the same device budget with the explored sizes
    sweep = run("device loop", keys, device, each, replicate, explore)
    learner = sweep["learner"]
    model = learner.fit_device()
    correction = model.fit.correction if model.fit else IDENTITY  # the one fitted before the residual
    without = rehashed(replace(model.profile, knob_correction=correction, residual=NONE))  # the fit before it
    cases = measurements(learner.storage, learner.soc, learner.backend)  # every measurement of the sweep, read once
    on_top = rehashed(replace(without, residual=device_residual(cases, without)))
    hardware = rehashed(replace(model.profile, knob_correction=IDENTITY, residual=NONE))
    noise_free = rehashed(replace(hardware, residual=noise_free_residual(cases, hardware, device)))
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(keys), size=min(judged, len(keys)), replace=False))
    names = ("shipped model, re-fit (bucket's buffers)", "fitted, no residual, re-fit (every buffer)",
             "fitted + residual, bucket's buffers (before)", "fitted + residual, re-fit (what ships)",
             "residual on top of the correction, whole space", "residual from noise-free times, whole space",
             "floor: every shared effect")  # fmt: skip
    regrets: dict[str, list[float]] = {name: [] for name in names}
    timed = [sweep["regret"][i] for i in chosen]
    cost: list[tuple[float, float]] = []
    for i in chosen:
        key, entry = keys[i], sweep["entries"][i]
        bucket = TilingParams(**entry.params)
        for f in FACTORS:
            n = max(int(key.size * f), 1)
            best, _ = device.optimum(key.variant, n)
            _, floor = device.optimum(key.variant, n, shared_only=True)
            picks = (
                refit(n, key.variant, device.soc, bucket),
                refit(n, key.variant, without, bucket),
                bucket_refit(key.variant, n, model.profile, bucket),
                refit(n, key.variant, model.profile, bucket),
                whole_space_pick(key.variant, n, on_top),
                whole_space_pick(key.variant, n, noise_free),
                floor,
            )
            for name, p in zip(names, picks, strict=True):
                regrets[name].append(device.true_us(key.variant, n, p) / best - 1.0)
            cost.append((refit_us(key.variant, n, without, bucket, False),
                         refit_us(key.variant, n, model.profile, bucket, True)))  # fmt: skip
    explored = (f" + {len(sweep['explored'])} sizes between them that teach most, all at {each} trials"
                if explore else f" at {trials} trials")  # fmt: skip
    draw = f", noise draw {replicate}" if replicate else ""
    print(f"\nstand-in device {shape}:{seed}{draw}: {len(keys)} keys{explored} ({sum(sweep['samples'])} launches), "
          f"{len(chosen)} judged ({time.monotonic() - start:.0f} s)")  # fmt: skip
    for label, r in (("residual (shipped: in the correction's place)", model.profile.residual),
                     ("residual on top of the correction", on_top.residual),
                     ("residual from noise-free times", noise_free.residual)):  # fmt: skip
        summary = r.summary()
        moved = sum(len(v) for v in summary["factors"].values())  # type: ignore[attr-defined]
        print(f"  {label}: penalty {summary['penalty']} (x{summary['interaction_weight']} on interactions), "
              f"held-out within-key log rms {summary['held_out_rms']} (none: {summary['held_out_rms_none']}), "
              f"{moved} levels moved, left out: {', '.join(summary['dropped']) or 'none'}")  # type: ignore[arg-type]  # fmt: skip
    print(f"  {'true regret':<52}{'median':>8}{'p90':>8}{'worst':>8}{'<=1%':>7}{'<=2%':>7}")
    print(_row("timed keys: the sweep's entries", timed))
    for name in names:
        print(_row(f"untimed: {name}", regrets[name]))
    before, after = np.array(cost).T
    print(f"  one re-fit (engine from Python, best of 3), median / p90 / worst: without the residual, the bucket's "
          f"buffers "
          f"{np.median(before):.1f} / {np.percentile(before, 90):.1f} / {before.max():.1f} us, what ships "
          f"{np.median(after):.1f} / {np.percentile(after, 90):.1f} / {after.max():.1f} us (median ratio "
          f"{np.median(after / before):.2f}x)", flush=True)  # fmt: skip


def _row(label: str, regrets: list[float]) -> str:
    r = np.asarray(regrets)
    return (f"  {label:<52}{100 * np.median(r):>7.2f}%{100 * np.percentile(r, 90):>7.2f}%{100 * r.max():>7.2f}%"
            f"{100 * np.mean(r <= 0.01):>6.0f}%{100 * np.mean(r <= 0.02):>6.0f}%")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="knob:7,realised:3,realised:11,crossed:1", help="shape:seed,...")
    ap.add_argument("--keys", type=int, default=120)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--judged", type=int, default=30)
    ap.add_argument("--explore", type=int, default=0,
                    help="also time this many sizes between the keys that teach most (tuner.explore), every key "
                         "at fewer trials: the same device budget")  # fmt: skip
    ap.add_argument("--replicate", type=int, default=0,
                    help="the sweep's draw of the device's sample noise (0: the documented figures); the device, "
                         "its keys and the judged sizes stay the same")  # fmt: skip
    a = ap.parse_args()
    if a.replicate < 0:
        ap.error(f"--replicate must be 0 or more, not {a.replicate}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for shape, seed in stand_in_devices(a.devices, ap):
        judge(shape, seed, a.keys, a.trials, a.judged, a.explore, a.replicate)
    return 0


if __name__ == "__main__":
    sys.exit(main())

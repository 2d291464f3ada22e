"""Sizes a sweep never timed: how close the re-fit gets there to the device's best, on stand-in devices
shaped like our knob correction and on ones that are not.

For each stand-in device (``tuner.synthetic.SyntheticDevice``: ``knob`` effects by block, BUFFER_NUM, tile,
alignment and core count, the shape of our correction; ``realised`` effects of what the knobs make of a
size: a copy's bytes against the buffer count, the last copy's alignment, core boundaries, tiles per core
against the buffer count, an odd core count), a device-loop sweep of ``--keys`` keys at ``--trials``
trials (``tuner.study.tune`` with the learner, as ``run_sweep`` runs it). Then ``--judged`` of its keys,
each at two sizes it never timed (x0.61 and x1.37), true regret over the exhaustive optimum of:

- the shipped model's re-fit (the bucket's BUFFER_NUM kept: what the service and the build do);
- the sweep's fitted profile (hardware and knob correction) in the same re-fit: what ships today;
- that profile scoring the whole space (every buffer count);
- the fitted hardware with the learned residual over the realised tiling (``tiling_model.residual``)
  instead of the knob correction, scoring the whole space: the candidate (Python only so far);
- the same residual fitted on what the knob correction leaves, on top of it (stacked);
- the floor: a model that knows every effect the device shares across sizes (all but the
  per-configuration part), whole space.

Last, how many configurations the engine's re-fit (a branch and bound whose floors carry the least
correction of what they bound) would have to predict if its floors took the residual's least factor per
buffer count and core count: what taking the residual into the engine needs tighter floors for.

The residual is fitted on every measurement of the sweep; where its held-out check fails it is 1.
Configurations are scored without the validation the service adds (the truth times any of them).

Run: ``make bench-search`` (or ``.venv/bin/python benchmarks/untimed_sizes.py``, ``--devices
knob:7,realised:3``); minutes per device.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import numpy as np
import optuna
from search_efficiency import pick_keys, run

from model_tools.calibrate import device_residual
from tiling_model import TilingParams, Variant, load_soc
from tiling_model.correction import IDENTITY
from tiling_model.kernels import bce_grad_kernel
from tiling_model.pick import refit
from tiling_model.residual import BY_TILE_TOO, COLUMN, Residual, levels
from tiling_model.soc import SocProfile
from tiling_model.space import score_space
from tuner.learning import measurements
from tuner.synthetic import DEVICE_SHAPES, SyntheticDevice

SOC = "Ascend910B2"
FACTORS = (0.61, 1.37)


def fitted_residual(learner: object, base: SocProfile) -> Residual:
    """The residual over every measurement of the sweep, on ``base`` (what it corrects)."""
    cases = measurements(learner.storage, learner.soc, learner.backend)  # type: ignore[attr-defined]
    return device_residual(cases, base)


def whole_space_pick(variant: Variant, n: int, profile: SocProfile, residual: Residual | None = None) -> TilingParams:
    kernel = bce_grad_kernel(variant, classes=1)
    scored = score_space(kernel, profile, n)
    us = scored.result.predicted_us
    if residual is not None and not residual.identity:
        lv = levels(n, kernel.elem_bytes, scored.block_bytes, scored.buffer_num, scored.tile_bytes, scored.core_num)
        us = us * residual.factors(lv)
    return scored.params(int(np.argmin(us)))


def judge(shape: str, seed: int, keys_count: int, trials: int, judged: int) -> None:
    device = SyntheticDevice(load_soc(SOC), seed, shape=shape)
    keys = pick_keys(keys_count)
    start = time.monotonic()
    sweep = run("device loop", keys, device, trials, 0)
    learner = sweep["learner"]
    model = learner.fit_device()
    base = replace(model.profile, knob_correction=IDENTITY)
    residual = fitted_residual(learner, base)
    stacked = fitted_residual(learner, model.profile)  # on what the knob correction leaves
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(keys), size=min(judged, len(keys)), replace=False))
    names = ("shipped model, re-fit (bucket's buffers)", "fitted profile, re-fit (today)",
             "fitted profile, whole space", "fitted + residual, whole space",
             "fitted + correction + residual, whole space", "floor: every shared effect")  # fmt: skip
    regrets: dict[str, list[float]] = {name: [] for name in names}
    timed = [sweep["regret"][i] for i in chosen]
    unpruned: list[tuple[int, int, int, int]] = []
    for i in chosen:
        key, entry = keys[i], sweep["entries"][i]
        bucket = TilingParams(**entry.params)
        for f in FACTORS:
            n = max(int(key.size * f), 1)
            best, _ = device.optimum(key.variant, n)
            _, floor = device.optimum(key.variant, n, shared_only=True)
            picks = (
                refit(n, key.variant, device.soc, bucket),
                refit(n, key.variant, model.profile, bucket),
                whole_space_pick(key.variant, n, model.profile),
                whole_space_pick(key.variant, n, base, residual),
                whole_space_pick(key.variant, n, model.profile, stacked),
                floor,
            )
            for name, p in zip(names, picks, strict=True):
                regrets[name].append(device.true_us(key.variant, n, p) / best - 1.0)
            if not residual.identity:
                unpruned.append(
                    (*_unpruned(key.variant, n, base, residual), _unpruned_today(key.variant, n, model.profile))
                )
    print(f"\nstand-in device {shape}:{seed}: {len(keys)} keys at {trials} trials, {len(chosen)} judged "
          f"({time.monotonic() - start:.0f} s)")  # fmt: skip
    for label, r in (("residual", residual), ("residual on the knob correction", stacked)):
        summary = r.summary()
        moved = sum(len(v) for v in summary["factors"].values())  # type: ignore[attr-defined]
        print(f"  {label}: penalty {summary['penalty']}, held-out within-key log rms {summary['held_out_rms']} "
              f"(none: {summary['held_out_rms_none']}), {moved} levels moved")  # fmt: skip
    print(f"  {'true regret':<52}{'median':>8}{'p90':>8}{'worst':>8}{'<=1%':>7}{'<=2%':>7}")
    print(_row("timed keys: the sweep's entries", timed))
    for name in names:
        print(_row(f"untimed: {name}", regrets[name]))
    if unpruned:
        by_cores, by_tile, space, today = np.array(unpruned).T
        print(f"  configurations whose floor is under the best (median / p90 of {np.median(space):.0f} in the "
              f"space): residual floors per buffer count and core count {np.median(by_cores):.0f} / "
              f"{np.percentile(by_cores, 90):.0f}, per tile too {np.median(by_tile):.0f} / "
              f"{np.percentile(by_tile, 90):.0f}; today's knob-correction floors {np.median(today):.0f} / "
              f"{np.percentile(today, 90):.0f}", flush=True)  # fmt: skip


def _unpruned(variant: Variant, n: int, base: SocProfile, residual: Residual) -> tuple[int, int, int]:
    """How many configurations a branch and bound could not drop if its floors carried the residual's
    least factor per buffer count and core count, and per tile too (``Residual.floor_factors``): what
    taking the residual into the engine's re-fit costs at each granularity of floor; and the space's size.
    Nothing without a residual."""
    if residual.identity:
        return 0, 0, 0
    kernel = bce_grad_kernel(variant, classes=1)
    scored = score_space(kernel, base, n)
    lv = levels(n, kernel.elem_bytes, scored.block_bytes, scored.buffer_num, scored.tile_bytes, scored.core_num)
    us = scored.result.predicted_us
    best = float((us * residual.factors(lv)).min())
    by_cores = int((us * residual.floor_factors(lv) <= best).sum())
    by_tile = int((us * residual.floor_factors(lv, BY_TILE_TOO) <= best).sum())
    return by_cores, by_tile, len(scored)


def _unpruned_today(variant: Variant, n: int, profile: SocProfile) -> int:
    """The same count for today's re-fit: floors with the knob correction's least factor over block sizes and
    tile alignments at the configuration's buffer count and core count (the engine's KnobFactorFloor)."""
    kc = profile.knob_correction
    kernel = bce_grad_kernel(variant, classes=1)
    scored = score_space(kernel, profile, n)
    lv = levels(n, kernel.elem_bytes, scored.block_bytes, scored.buffer_num, scored.tile_bytes, scored.core_num)
    bn, cores = lv[:, COLUMN["buffer_num"]], lv[:, COLUMN["cores"]]
    exact = np.array([kc.factor(int(b), int(m), int(t), int(c)) for b, m, t, c in
                      zip(scored.block_bytes, bn, scored.tile_bytes, cores, strict=True)])  # fmt: skip
    floor = min(kc.block) * np.array(kc.buffer)[bn] * min(kc.align) * np.array(kc.cores)[np.minimum(cores, 64)]
    us = scored.result.predicted_us  # with each configuration's own factor
    return int((us / exact * floor <= float(us.min())).sum())


def _row(label: str, regrets: list[float]) -> str:
    r = np.asarray(regrets)
    return (f"  {label:<52}{100 * np.median(r):>7.2f}%{100 * np.percentile(r, 90):>7.2f}%{100 * r.max():>7.2f}%"
            f"{100 * np.mean(r <= 0.01):>6.0f}%{100 * np.mean(r <= 0.02):>6.0f}%")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="knob:7,realised:3,realised:11", help="shape:seed,...")
    ap.add_argument("--keys", type=int, default=120)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--judged", type=int, default=30)
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for spec in a.devices.split(","):
        shape, _, seed = spec.partition(":")
        if shape not in DEVICE_SHAPES or not seed.isdigit():
            ap.error(f"--devices: {spec!r} is not shape:seed with a shape of {', '.join(DEVICE_SHAPES)}")
        judge(shape, int(seed), a.keys, a.trials, a.judged)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m tuner replay``: re-run search strategies offline against one device run's records.

A sweep's records (``--records runs.jsonl``) hold every configuration it measured, with its samples. The
replay is a backend that answers from them: a recorded configuration returns one of its own samples
(drawn at random: the noise it had); any other returns the model fitted to the records
(``model_tools.calibrate.fit_device``) times the residual of the nearest recorded configuration of the
same key, with the records' own noise. So strategies and budgets can be compared on what a device did,
without the device. What no record can say (a configuration far from every recorded one) is the model's:
the replay is as good as the records' coverage, and says how many answers came from records.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna

from model_tools.calibrate import CalibrationError, fit_device, record_case, record_documents
from tiling_model import SocProfile, TilingData, Variant, compute_tiling, load_soc, predict
from tiling_model.correction import align_class, align_classes, block_class, block_classes
from tiling_model.space import score_space
from tuner.key import StudyKey
from tuner.learning import Learner
from tuner.trial_space import TrialSpace


@dataclass
class _Recorded:
    knobs: tuple[int, int, int, int]
    samples: list[float]
    residual: float  # log(measured median / fitted model)


@dataclass
class ReplayDevice:
    """The records of one SoC, by key, and the model fitted to them."""

    soc: SocProfile
    profile: SocProfile  # fitted to the records
    keys: list[StudyKey]
    recorded: dict[tuple[str, int], list[_Recorded]]  # (variant label, n) -> its configurations
    noise: float  # log sd of one sample around its configuration's median (the records' own)
    answered: dict[str, int] = field(default_factory=lambda: {"recorded": 0, "model": 0})

    def truth_us(self, t: TilingData) -> float:
        """The noise-free time the replay stands for: a recorded median, else model x nearest residual."""
        rec = self._nearest(t)
        if rec is not None and rec.knobs == _knobs(t):
            return float(np.median(rec.samples))
        return predict(t, self.profile) * math.exp(rec.residual if rec is not None else 0.0)

    def _nearest(self, t: TilingData) -> _Recorded | None:
        group = self.recorded.get((t.variant.label(), t.n))
        if not group:
            return None
        k = _knobs(t)
        return min(group, key=lambda r: _distance(r.knobs, k))

    def optimum(self, variant: Variant, n: int) -> float:
        """The best replayed time over the whole space of a key (each configuration: the model times the
        residual of its nearest recorded one)."""
        space = TrialSpace(self.soc, variant)
        scored = score_space(space.kernel, self.profile, n)
        pred = scored.result.predicted_us
        group = self.recorded.get((variant.label(), n), [])
        if not group:
            return float(pred.min())
        res = np.array([r.residual for r in group])
        feats = np.array([_features(r.knobs) for r in group])
        cand = _features_cols(scored.block_bytes, scored.buffer_num, scored.tile_bytes, scored.core_num)
        nearest = np.argmin(((cand[:, None, :] - feats[None, :, :]) ** 2).sum(axis=2), axis=1)
        recorded_best = min(float(np.median(r.samples)) for r in group)
        return min(float((pred * np.exp(res[nearest])).min()), recorded_best)


def _knobs(t: TilingData) -> tuple[int, int, int, int]:
    p = t.params
    return (int(p.block_bytes or 0), int(p.buffer_num or 0), int(p.tile_bytes or 0), int(p.core_num or 0))


def _features(k: tuple[int, int, int, int]) -> np.ndarray:
    block, bn, tile, cores = k
    return np.array([block_class(block), 2.0 * bn, align_class(tile) + tile / 8192.0, cores / 8.0])


def _features_cols(block: np.ndarray, bn: np.ndarray, tile: np.ndarray, cores: np.ndarray) -> np.ndarray:
    b = block_classes(block).astype(float)
    a = align_classes(tile).astype(float) + tile / 8192.0
    return np.stack([b, 2.0 * bn, a, cores / 8.0], axis=1)


def _distance(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    return float(((_features(a) - _features(b)) ** 2).sum())


class ReplayBackend:
    """Samples from a ReplayDevice: a recorded configuration's own samples, else the model's time with the
    records' noise."""

    name = "replay"
    deterministic = False
    runs_kernel = False

    def __init__(self, device: ReplayDevice, seed: int = 0) -> None:
        self.device = device
        self._rng = np.random.default_rng(seed)
        self.samples = 0

    def sample(self, tiling: TilingData) -> float:
        self.samples += 1
        rec = self.device._nearest(tiling)
        if rec is not None and rec.knobs == _knobs(tiling):
            self.device.answered["recorded"] += 1
            return float(self._rng.choice(rec.samples))
        self.device.answered["model"] += 1
        return self.device.truth_us(tiling) * float(np.exp(self._rng.normal(0.0, self.device.noise)))

    def flush_l2(self) -> None:
        return None


def replay_device(paths: Sequence[Path], soc_name: str | None = None) -> ReplayDevice:
    """The records in ``paths`` (of one SoC) as a ReplayDevice; CalibrationError naming what is wrong."""
    docs = record_documents(paths)
    socs = {str(r["soc"]) for _, r in docs if r.get("soc")}
    if soc_name is None:
        if len(socs) != 1:
            raise CalibrationError(f"records of {sorted(socs) or 'no SoC'}: pass --soc to pick one")
        soc_name = next(iter(socs))
    soc = load_soc(soc_name)
    mine = [(where, r) for where, r in docs if r.get("soc", soc.name) == soc.name]
    cases = [record_case(where, r, soc) for where, r in mine]
    samples_of = [r.get("samples") or [r["measured_us"]] for _, r in mine]
    if not cases:
        raise CalibrationError(f"no records of {soc.name}")
    fit = fit_device(cases, soc, folds=0)
    residuals = -np.log1p(fit.after)
    recorded: dict[tuple[str, int], list[_Recorded]] = {}
    keys: dict[tuple[str, int], StudyKey] = {}
    noise = []
    for m, samples, res in zip(cases, samples_of, residuals, strict=True):
        t = m.launches[0]
        group = (t.variant.label(), t.n)
        keys.setdefault(group, StudyKey(soc.name, t.variant, t.n))
        recorded.setdefault(group, []).append(_Recorded(_knobs(t), [float(x) for x in samples], float(res)))
        if len(samples) >= 3:
            logs = np.log(np.asarray(samples, dtype=float))
            noise.append(1.4826 * float(np.median(np.abs(logs - np.median(logs)))))
    return ReplayDevice(soc, fit.profile, list(keys.values()), recorded, statistics.median(noise) if noise else 0.02)


def replay(device: ReplayDevice, strategies: Sequence[str], budgets: Sequence[int], seed: int = 0) -> list[dict]:
    """Each strategy at each budget over the recorded keys, in their order (the race with its learner, as
    a sweep runs it): the replayed regret of each key's pick and the samples it took."""
    from tuner.study import tune

    out = []
    for strategy in strategies:
        for budget in budgets:
            backend = ReplayBackend(device, seed)
            storage = optuna.storages.InMemoryStorage()
            learner = Learner(device.soc, storage, backend.name) if strategy == "race" else None
            regrets, samples = [], []
            for key in device.keys:
                before = backend.samples
                e = tune(key, backend, storage, budget, model=learner.model() if learner else None, strategy=strategy)
                if learner:
                    learner.study_done()
                got = device.truth_us(compute_tiling([key.size], key.variant, e.tiling_params(), device.soc))
                regrets.append(got / device.optimum(key.variant, key.size) - 1.0)
                samples.append(backend.samples - before)
            out.append({"strategy": strategy, "budget": budget, "keys": len(device.keys), "regret": regrets,
                        "samples": samples})  # fmt: skip
    return out

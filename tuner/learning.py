"""A sweep learns its device: every measurement it has taken refits the model the next keys are seeded by.

The measurements are read from the study storage, not from one worker's memory or file: every worker of
a sweep (several NPUs of a host, several hosts on one PostgreSQL) writes its trials there, so each one
learns from all of them. The fit is ``model_tools.calibrate.fit_device``: the SoC profile's hardware
parameters (robust, bounded by physics) with the knob correction on what they leave, then the residual over
the realised tiling (``tiling_model.residual``) in the correction's place where held-out keys say it is better.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from model_tools.calibrate import DeviceFit, Measured, fit_device
from tiling_model import BadRequest, SocProfile, TilingParams, Variant, compute_tiling
from tiling_model.residual import rows_by_key
from tuner.key import StudyKey
from tuner.trial_attrs import knobs_of, measurement_of

#: The relative error of the shipped model between configurations of one key, before the device has
#: been measured (log sd; the leave-one-operator-out error across operators is ~15%, within one key's
#: configurations the ranking errs less).
PRIOR_SIGMA = 0.04
#: A fitted model's within-key error is never taken below this (the noise of a short measurement).
MIN_SIGMA = 0.01
#: Measurements and keys before the first fit; cases the hardware fit takes (evenly over keys: the residual
#: takes every one).
MIN_CASES = 24
MIN_KEYS = 2
MAX_CASES = 900


@dataclass(frozen=True)
class DeviceModel:
    """What the sweep believes about its device now."""

    profile: SocProfile  # the shipped profile until a fit, then the device's
    sigma: float  # log sd of the model's error between configurations of one key
    fit: DeviceFit | None = None

    @property
    def fitted(self) -> bool:
        return self.fit is not None

    @property
    def keys(self) -> int:
        """How many keys the fit saw (0 before a fit): how settled the model is (``RacePlan.settled_keys``)."""
        return 0 if self.fit is None else len({m.key for m in self.fit.cases})


def key_attrs(key: StudyKey) -> dict[str, Any]:
    """What a study stores about its key, so any worker can rebuild its measurements."""
    v = key.variant
    return {"soc": key.soc, "size": key.size, "dtype": v.dtype, "reduction": v.reduction, "weight": v.weight,
            "pos_weight": v.pos_weight, "wrt": v.wrt, "mode": v.mode}  # fmt: skip


def _key_of(attrs: dict[str, Any]) -> StudyKey:
    v = Variant(attrs["dtype"], attrs["reduction"], attrs["weight"], attrs["pos_weight"], attrs["wrt"],
                attrs.get("mode", "grad"))  # studies made before the fused mode have none  # fmt: skip
    return StudyKey(attrs["soc"], v, int(attrs["size"]))


def measurements(storage: optuna.storages.BaseStorage, soc: SocProfile, backend: str) -> list[Measured]:
    """Every measured trial of bcetune's kernel on ``soc`` and ``backend`` in the storage (duplicates of an
    already measured configuration and failed trials left out), as calibration cases."""
    return StoredMeasurements(storage, soc, backend).read()


class StoredMeasurements:
    """``measurements`` of one storage, read again where a study changed: the learner refits after every key, and
    reading every study's trials each time grew with the sweep (on SQLite ~9 ms a study: a 924-key sweep's refits
    would have read for an hour). A study is read again when its attributes change, which they do as its trials
    do: a race sets its heartbeat before each measurement and its samples at its end, TPE its confirmation at its
    end, a second look both (a completed trial is immutable in Optuna). So another worker's race in progress is
    seen up to its latest measurement but one; the same cases in the same order as reading all."""

    def __init__(self, storage: optuna.storages.BaseStorage, soc: SocProfile, backend: str) -> None:
        self.storage, self.soc, self.backend = storage, soc, backend
        self._studies: dict[int, tuple[str, list[Measured]]] = {}  # study id -> (its attributes, its cases)

    def read(self) -> list[Measured]:
        out: list[Measured] = []
        for frozen in self.storage.get_all_studies():
            attrs = frozen.user_attrs.get("key")
            if not attrs or attrs.get("soc") != self.soc.name or not frozen.study_name.endswith(f"/{self.backend}"):
                continue
            stamp = json.dumps(frozen.user_attrs, sort_keys=True, default=str)
            seen = self._studies.get(frozen._study_id)
            if seen is None or seen[0] != stamp:
                raced = frozen.user_attrs.get("race", {})  # every sample a race took, by configuration
                seen = (stamp, self._cases(frozen._study_id, frozen.study_name, _key_of(attrs), raced))
                self._studies[frozen._study_id] = seen
            out += seen[1]
        return out

    def _cases(self, study_id: int, name: str, key: StudyKey, raced: dict[str, list[float]]) -> list[Measured]:
        out: list[Measured] = []
        for t in self.storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,)):
            knobs = knobs_of(t)
            if "duplicate_of" in t.user_attrs or t.value is None or knobs is None:
                continue
            samples = raced.get("/".join(str(k) for k in knobs))
            try:
                tiling = compute_tiling([key.size], key.variant, TilingParams(*knobs), self.soc)
            except BadRequest:
                continue
            stored = measurement_of(t)
            us = float(np.median(samples)) if samples else (stored.median_us if stored else float(t.value))
            out.append(Measured("bce_grad", f"{name}#{t.number}", (tiling,), us, True, False, name))
        return out


def within_key_sigma(fit: DeviceFit) -> float:
    """The fitted model's relative error between configurations of one key: the robust sd of each key's
    log residuals around that key's own median (held out by key where the fit has folds)."""
    errs = fit.held_out if fit.held_out is not None else fit.after
    logs = np.log1p(np.asarray(errs, dtype=float))
    groups = [logs[rows] for rows in rows_by_key(np.array([m.key for m in fit.cases]))]
    centred = np.concatenate([g - np.median(g) for g in groups]) if groups else np.zeros(0)
    mad = 1.4826 * float(np.median(np.abs(centred))) if centred.size else PRIOR_SIGMA
    return max(mad, MIN_SIGMA)


class Learner:
    """Refits the device model from the storage after every ``every`` studies."""

    def __init__(self, soc: SocProfile, storage: optuna.storages.BaseStorage, backend: str, every: int = 1) -> None:
        self.soc, self.storage, self.backend, self.every = soc, storage, backend, max(1, every)
        self._model = DeviceModel(soc, PRIOR_SIGMA)
        self._stored = StoredMeasurements(storage, soc, backend)
        self._studies = 0
        self.fits = 0

    def model(self) -> DeviceModel:
        return self._model

    def study_done(self) -> None:
        self._studies += 1
        if self._studies % self.every == 0:
            self.fit_device()

    def cases(self) -> list[Measured]:
        """Every measurement in the storage (``measurements``), read again only where a study changed."""
        return self._stored.read()

    def fit_device(self, folds: int = 0) -> DeviceModel:
        """Fit the device to every measurement in the storage (``folds`` > 0: also held out by key, for
        the table's intervals); too few measurements keep the model as it is."""
        cases = self.cases()
        if len(cases) < MIN_CASES or len({m.key for m in cases}) < MIN_KEYS:
            return self._model
        fit = fit_device(cases, self.soc, folds=folds, hardware_cap=MAX_CASES)
        self._model = DeviceModel(fit.profile, within_key_sigma(fit), fit)
        self.fits += 1
        return self._model


def device_profile_document(model: DeviceModel) -> dict[str, Any] | None:
    """The table's ``device``: the fitted profile as a document (its calibration: the device fit) and the
    fit's summary; None before any fit."""
    from tiling_model.soc import profile_to_json

    if model.fit is None:
        return None
    summary = model.fit.summary() | {"within_key_sigma": round(model.sigma, 4)}
    doc = profile_to_json(replace(model.profile, calibration=None))
    how = (
        f"fitted on this sweep's {summary['cases']} measurements of bcetune's kernel over {summary['keys']} keys "
        "(model_tools.calibrate.fit_device)"
    )
    for name in summary["fitted"]:
        field = {"mte2_scale": "mte2_curve_kib_us", "mte3_scale": "mte3_curve_kib_us"}.get(name, name)
        doc["sources"][field] = how
    if "knob_correction" in doc:
        doc["sources"]["knob_correction"] = how + ": the device's knob effects (tiling_model.correction)"
    doc["calibration"] = {"measured_on": model.profile.name, "device": True, **summary}
    return {"profile": doc, "fit": summary}


def band_for(sigma: float, z: float = 2.0) -> float:
    """How far above the model's best a configuration may be predicted and still be the device's best."""
    return math.exp(z * sigma)

"""The learned residual on a real sweep's measurements: on a stand-in device whose effects follow the
realised tiling, what a device-loop sweep stored is enough to learn something its fitted profile does not
know, checked on keys the residual was not fitted on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest

from model_tools.calibrate import device_residual
from tiling_model import Variant, load_soc
from tiling_model.correction import IDENTITY
from tiling_model.residual import levels
from tiling_model.tiling import KNOB_NAMES
from tuner.key import StudyKey
from tuner.learning import measurements
from tuner.storage import open_storage
from tuner.sweep import run_sweep
from tuner.synthetic import SyntheticBackend, SyntheticDevice

pytestmark = pytest.mark.slow  # a sweep against a stand-in device

SOC = load_soc("Ascend910B2")


def test_a_realised_devices_sweep_teaches_the_residual(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = SyntheticDevice(SOC, seed=3, shape="realised")
    keys = [StudyKey(SOC.name, Variant(d, r, "full"), n) for d in ("float16", "float32") for r in ("none", "mean")
            for n in (30_011, 700_001, 5_000_011)]  # fmt: skip
    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    backend = SyntheticBackend(device, seed=2)
    table = run_sweep(keys, backend, storage, 16, tmp_path / "Ascend910B2.json", False)
    cases = measurements(storage, SOC, backend.name)
    assert len({m.key for m in cases}) == len(keys)
    base = replace(table.profile(), knob_correction=IDENTITY)  # the fitted hardware
    r = device_residual(cases, base)
    assert not r.identity
    assert r.held_out_rms < 0.8 * r.held_out_rms_none  # keys it was not fitted on, ranked better (0.53x here)
    # and it ranks the configurations the sweep measured closer to the device's shared effects
    lv = np.vstack([levels(m.launches[0].n, m.launches[0].elem_bytes, *(np.array([getattr(m.launches[0].params, k)])
                    for k in KNOB_NAMES)) for m in cases])  # fmt: skip
    f = r.factors(lv)
    shared = np.array([device.effects(*(np.array([getattr(m.launches[0].params, k)]) for k in KNOB_NAMES), 0,
                                      m.launches[0].n, m.launches[0].elem_bytes, True)[0] for m in cases])  # fmt: skip
    assert np.corrcoef(np.log(f), np.log(shared))[0, 1] > 0.7  # 0.97 here

"""The learned residual on a real sweep's measurements: on a stand-in device whose effects follow the
realised tiling, what a device-loop sweep stored is enough to learn something its fitted profile does not
know, checked on keys the residual was not fitted on; the sweep's table carries it, and the build of that
table's exported header tiles every call as the service answers from the table."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest

from kernel.host_tiling import build_host_tiling, query_host_tiling
from model_tools.calibrate import Measured, device_residual
from service.answers import CachedAnswers, Query
from tiling_model import Variant, load_soc
from tiling_model.correction import IDENTITY
from tiling_model.residual import NONE, levels
from tiling_model.tables import TuningTable
from tiling_model.tiling import KNOB_NAMES
from tuner.export_header import export_header
from tuner.key import StudyKey
from tuner.learning import measurements
from tuner.storage import open_storage
from tuner.sweep import run_sweep
from tuner.synthetic import SyntheticBackend, SyntheticDevice

pytestmark = pytest.mark.slow  # a sweep against a stand-in device

SOC = load_soc("Ascend910B2")


DEVICE = SyntheticDevice(SOC, seed=3, shape="realised")
KEYS = [StudyKey(SOC.name, Variant(d, r, "full"), n) for d in ("float16", "float32") for r in ("none", "mean")
        for n in (30_011, 700_001, 5_000_011)]  # fmt: skip


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TuningTable, list[Measured]]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tmp = tmp_path_factory.mktemp("realised")
    storage = open_storage(f"sqlite:///{tmp / 'studies.db'}")
    backend = SyntheticBackend(DEVICE, seed=2)
    table = run_sweep(KEYS, backend, storage, 16, tmp / "Ascend910B2.json", False)
    return tmp, table, measurements(storage, SOC, backend.name)


def test_a_realised_devices_sweep_teaches_the_residual(swept: tuple[Path, TuningTable, list[Measured]]) -> None:
    _, table, cases = swept
    device = DEVICE
    assert len({m.key for m in cases}) == len(KEYS)
    base = replace(table.profile(), knob_correction=IDENTITY, residual=NONE)  # the fitted hardware
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


def test_the_sweeps_table_carries_its_residual_and_the_build_tiles_as_the_service(
    swept: tuple[Path, TuningTable, list[Measured]],
) -> None:
    """The learner fits the residual on top of the knob correction; the table's profile carries it (its
    summary says what it learnt); the exported header carries its factors to the bit, and the C++ host
    tiling built with that header picks the knobs, struct and block dim the service picks from the table
    at random untimed sizes (most of them re-fits, which search every buffer count with the residual)."""
    tmp, table, _ = swept
    profile = table.profile()
    assert not profile.residual.identity and table.device["fit"]["residual"]["factors"]
    header = tmp / "bce_grad_tuned_table.h"
    export_header(tmp, header)
    exported = re.search(r"kSoc0ResidualFactor\[\] = \{([^}]*)\}", header.read_text())
    assert exported and tuple(float(x) for x in exported.group(1).split(",")) == profile.residual.table()
    exe = build_host_tiling(header)
    rng = np.random.default_rng(5)
    variants = sorted({k.variant for k in KEYS}, key=lambda v: v.label())
    calls = [(SOC.name, variants[rng.integers(len(variants))], int(np.exp(rng.uniform(np.log(2e4), np.log(2e7)))))
             for _ in range(150)]  # fmt: skip
    answers = CachedAnswers({SOC.name: table})
    refits = other_buffers = 0
    for (soc, v, n), got in zip(calls, query_host_tiling(calls, exe), strict=True):
        want = answers.resolve(Query(soc, (n,), v, (), 0))
        assert got.params.as_dict() == want["params"], (v.label(), n)
        assert got.fields == tuple(want["tiling"].values()) and got.block_dim == want["block_dim"], (v.label(), n)
        refits += got.refitted
        entry = table.lookup(v, n)
        other_buffers += entry is not None and got.params.buffer_num != entry.tiling_params().buffer_num
    assert refits > 100
    # a device's table re-fits over every buffer count (pick.refit): some untimed sizes leave the bucket's
    assert other_buffers > 0

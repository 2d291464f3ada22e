"""What a trial stores (tuner.trial_attrs): its configuration and its measurement, one attribute each, written
by the race and by TPE alike; a storage written in the older form (an attribute per knob and per figure) reads
the same, so a sweep resumes it."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import sqlalchemy

from tiling_model import Variant, load_soc
from tuner.backends import ModelBackend
from tuner.key import StudyKey
from tuner.learning import measurements
from tuner.storage import open_storage
from tuner.study import tune
from tuner.synthetic import SyntheticBackend, SyntheticDevice
from tuner.trial_attrs import CONFIG_ATTR, MEASURED_ATTR, knobs_of, measurement_of

SOC = load_soc("Ascend910B2")
KEYS = [
    StudyKey(SOC.name, Variant("float32", "mean", True), 300_001),
    StudyKey(SOC.name, Variant("float16", "none", False), 1 << 20),
]
BOOKKEEPING = {"duplicate_of", "measuring"}  # a live TPE trial's claim of its configuration


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.storages.RDBStorage, int, int]:
    """Two keys raced on a stand-in device and the same two searched by TPE on the noisy model, on SQLite; the
    SQL statements each sent per trial."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(f"sqlite:///{tmp_path_factory.mktemp('attrs') / 's.db'}")
    sent = [0]
    sqlalchemy.event.listen(storage.engine, "before_cursor_execute", lambda *_: sent.__setitem__(0, sent[0] + 1))
    per_trial = []
    for backend, strategy in ((SyntheticBackend(SyntheticDevice(SOC, seed=3), seed=1), "race"),
                              (ModelBackend(noise=0.02, seed=1), "tpe")):  # fmt: skip
        before, trials = sent[0], 0
        for key in KEYS:
            tune(key, backend, storage, 10, strategy=strategy)
            study = optuna.load_study(study_name=key.study_name(backend.name), storage=storage)
            trials += len(study.trials)
        per_trial.append((sent[0] - before) // trials)
    return storage, per_trial[0], per_trial[1]


def trials_of(storage: optuna.storages.BaseStorage) -> list[optuna.trial.FrozenTrial]:
    return [t for s in storage.get_all_studies() for t in storage.get_all_trials(s._study_id, deepcopy=False)]


def test_a_measured_trial_keeps_its_configuration_and_measurement_in_two_attributes(swept) -> None:
    storage, race_statements, tpe_statements = swept
    measured = [t for t in trials_of(storage) if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(measured) >= 4 * 10
    for t in measured:
        assert set(t.user_attrs) - BOOKKEEPING <= {CONFIG_ATTR, MEASURED_ATTR}, t.user_attrs.keys()
        knobs = knobs_of(t)
        assert knobs is not None and len(knobs) == 4
        if "duplicate_of" in t.user_attrs:  # a TPE trial of a configuration timed before: its value reused
            continue
        m = measurement_of(t)
        assert m is not None and m.median_us == t.value and len(m.samples) >= 5 and m.predicted_us > 0
        assert (m.predicted_device_us is not None) == (t.user_attrs[MEASURED_ATTR].keys() >= {"predicted_device_us"})
    # counted at the driver: with a knob and a figure an attribute these trials sent 48.8 and 98.1 statements each
    # (a TPE trial's reads are Optuna's own: its sampler, the claim's two looks); packed 30.8 and 80.1
    assert race_statements <= 36 and tpe_statements <= 88, (race_statements, tpe_statements)


def legacy_copy(storage: optuna.storages.BaseStorage) -> optuna.storages.InMemoryStorage:
    """The storage as the older form wrote it: every knob and every figure its own attribute."""
    old = optuna.storages.InMemoryStorage()
    for s in storage.get_all_studies():
        study = optuna.create_study(storage=old, study_name=s.study_name)
        for k, v in s.user_attrs.items():
            study.set_user_attr(k, v)
        for t in storage.get_all_trials(s._study_id):
            attrs = {k: v for k, v in t.user_attrs.items() if k not in (CONFIG_ATTR, MEASURED_ATTR)}
            knobs = knobs_of(t)
            if knobs is not None:
                attrs |= dict(zip(("block_bytes", "buffer_num", "tile_bytes", "core_num"), knobs, strict=True))
            doc = t.user_attrs.get(MEASURED_ATTR)
            if doc is not None:
                attrs |= doc | {"spread_us": doc["iqr_us"]}
            study.add_trial(optuna.trial.create_trial(state=t.state, params=t.params, distributions=t.distributions,
                                                      value=t.value, user_attrs=attrs))  # fmt: skip
    return old


def test_a_storage_written_in_the_older_form_reads_the_same(swept) -> None:
    storage = swept[0]
    old = legacy_copy(storage)
    new_trials, old_trials = trials_of(storage), trials_of(old)
    assert len(new_trials) == len(old_trials) and all(CONFIG_ATTR not in t.user_attrs for t in old_trials)
    for new, was in zip(new_trials, old_trials, strict=True):
        assert knobs_of(was) == knobs_of(new) and measurement_of(was) == measurement_of(new), new.number
    for backend in ("synthetic", "model"):
        cases = measurements(storage, SOC, backend)
        assert cases and measurements(old, SOC, backend) == cases


def test_a_live_trial_of_the_older_form_holds_no_configuration_until_it_completes(tmp_path: Path) -> None:
    """Its knobs were written one at a time: read half-written, they named a configuration no one measured."""
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 's.db'}"))
    trial = study.ask()
    for k, v in {"block_bytes": 512, "buffer_num": 2, "tile_bytes": 8192, "core_num": 40}.items():
        trial.set_user_attr(k, v)
    (live,) = study.get_trials(deepcopy=False)
    assert knobs_of(live) is None and measurement_of(live) is None
    study.tell(trial, 9.5)
    (done,) = study.get_trials(deepcopy=False)
    assert knobs_of(done) == (512, 2, 8192, 40) and measurement_of(done) is None  # no samples: none measured

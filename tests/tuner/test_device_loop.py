"""The device loop: a sweep on a timed backend learns its device, and everything downstream uses it.

Driven on the stand-in device (tuner.synthetic: the model with a perturbed profile, knob-structured
effects and noise with outliers) as a real NPU would be: the fitted profile moves toward the device's,
the learnt model finds better tilings in the same trials (and, told to stop early, in fewer), the table
carries the fitted profile, the service answers
from it, records round-trip through calibrate and replay; and the CPU twin (a real clock running the real
kernel) goes through the same path in CI."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import optuna
import pytest

from tiling_model import TilingParams, Variant, compute_tiling, load_soc, predict
from tiling_model.soc import profile_from_json
from tiling_model.tables import load_table
from tuner.backends import CpuTwinBackend
from tuner.key import StudyKey
from tuner.learning import DeviceModel
from tuner.race import RacePlan
from tuner.records import RecordLog
from tuner.storage import open_storage
from tuner.sweep import run_sweep
from tuner.synthetic import SyntheticBackend, SyntheticDevice
from tuner.trial_attrs import knobs_of

pytestmark = pytest.mark.slow  # sweeps against a stand-in device, end to end

SOC = load_soc("Ascend910B2")
DEVICE = SyntheticDevice(SOC, seed=4)  # HBM 5% slower than the profile, copies 14% slower


def keys() -> list[StudyKey]:
    """Eight keys, then eight more of the same variants at sizes 50% larger: as hard as the first, but
    searched on a model that has learnt the device from them."""
    first = [(d, r, n) for d in ("float16", "float32") for r in ("none", "mean") for n in (16384, 1 << 22)]
    out = [StudyKey(SOC.name, Variant(d, r, "none"), n) for d, r, n in first]
    return out + [StudyKey(SOC.name, Variant(d, r, "none"), n * 3 // 2) for d, r, n in first]


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tmp = tmp_path_factory.mktemp("loop")
    storage = open_storage(f"sqlite:///{tmp / 'studies.db'}")
    records = tmp / "runs.jsonl"
    table = run_sweep(keys(), SyntheticBackend(DEVICE, seed=2), storage, 16, tmp / "Ascend910B2.json", False,
                      records=RecordLog(records))  # fmt: skip
    return tmp, records, table


def unseen_errors(device: SyntheticDevice, profile: object) -> list[float]:
    """|predicted / true - 1| on 60 configurations no key measured (random sizes, dtypes and knobs)."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(60):
        n = int(np.exp(rng.uniform(np.log(2e3), np.log(4e7))))
        v = Variant(str(rng.choice(["float16", "float32", "bfloat16"])), "none", "full")
        p = TilingParams(int(rng.choice([512, 2048, 8192])), int(rng.integers(1, 3)), 512 * int(rng.integers(4, 30)),
                         int(rng.integers(8, 49)))  # fmt: skip
        t = compute_tiling([n], v, p, SOC)
        out.append(abs(predict(t, profile) / device.truth_us(t) - 1))  # type: ignore[arg-type]
    return out


def test_the_fitted_profile_predicts_the_device_better(swept) -> None:
    _, _, table = swept
    learnt = table.profile()  # the residual in the knob correction's place, or the correction where it is none
    assert table.device is not None and learnt.residual.identity != learnt.knob_correction.identity
    # the device's times of configurations no key measured (device 4: its hardware and knob effects)
    assert statistics.median(unseen_errors(DEVICE, table.profile())) < statistics.median(unseen_errors(DEVICE, SOC))
    fit = table.device["fit"]
    assert fit["median"] < fit["median_before"] and fit["held_out_median"] < fit["median_before"]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_on_every_stand_in_device_the_fit_predicts_held_out_keys_better(seed: int) -> None:
    """What holds on all five devices: the fit predicts keys it did not see (folds of keys) better than the
    shipped profile does. Not asserted, because it does not hold for all: that each hardware parameter
    moves toward the device's (HBM moved away on two seeds), that the error halves (three did not), or
    that configurations far from the sweep's keys improve (device 1: 2.0% against the shipped 1.8% on
    ``unseen_errors``'s bfloat16 and buffer counts the keys never ran): the fit is a curve fit of what the
    sweep's keys exercise, not a measurement of the hardware."""
    from model_tools.calibrate import fit_device
    from tuner.learning import measurements
    from tuner.study import tune

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = SyntheticDevice(SOC, seed=seed)
    storage = optuna.storages.InMemoryStorage()
    backend = SyntheticBackend(device, seed=seed)
    for key in keys()[:8]:
        tune(key, backend, storage, 12)
    fit = fit_device(measurements(storage, SOC, backend.name), SOC).summary()
    assert fit["held_out_median"] < fit["median_before"] and fit["median"] < fit["median_before"]


def test_every_key_spends_its_budget_and_the_learnt_model_finds_better_tilings(swept, tmp_path: Path) -> None:
    """The race spends each key's trials (its early stop is asked for: RacePlan.stop_early); the same keys
    searched without learning the device pick worse."""
    _, _, table = swept
    assert [e.trials for e in table.entries] == [16] * len(table.entries)
    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    blind = run_sweep(keys(), SyntheticBackend(DEVICE, seed=2), storage, 16, None, False, learn=False)
    assert [e.trials for e in blind.entries] == [16] * len(blind.entries)

    def regret(t) -> float:  # noqa: ANN001
        return statistics.mean(
            DEVICE.true_us(e.variant, e.size, e.tiling_params()) / DEVICE.optimum(e.variant, e.size)[0] - 1
            for e in t.entries
        )

    assert regret(table) < regret(blind)


def test_stopping_early_takes_fewer_trials_once_the_device_is_fitted(tmp_path: Path) -> None:
    """``--stop-early``: the keys searched before the device was fitted (the first two) take the whole budget;
    the rest, on the learnt model, stop once nothing untimed is expected to beat their leader (without the
    second look, whose race on the learnt model may stop early too)."""
    from tuner.learning import MIN_KEYS
    from tuner.race import RacePlan

    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    early = run_sweep(keys(), SyntheticBackend(DEVICE, seed=2), storage, 16, None, False,
                      plan=RacePlan(stop_early=True, second_look=0))  # fmt: skip
    trials = [e.trials for e in early.entries]  # in the sweep's order
    assert trials[:MIN_KEYS] == [16] * MIN_KEYS and statistics.mean(trials[MIN_KEYS:]) < 16


def test_the_table_carries_the_fitted_profile_and_the_service_answers_from_it(swept) -> None:
    tmp, _, table = swept
    loaded = load_table(tmp / "Ascend910B2.json")
    profile = profile_from_json(loaded.device["profile"])
    assert loaded.soc_profile_hash == profile.profile_hash != SOC.profile_hash
    assert loaded.device["profile"]["calibration"]["device"] is True
    from service.answers import Query
    from service.store import load_snapshot

    snap = load_snapshot(tmp)
    assert not snap.tables["Ascend910B2"].stale  # a device-tuned table is fresh with its own profile
    doc = snap.answers.resolve(Query(SOC.name, (3000, 1000), Variant("float16", "mean", "none"), ()))
    assert doc["provenance"]["device_fitted"] is True and doc["source"] == "bucket"
    t = compute_tiling([3000, 1000], Variant("float16", "mean", "none"), TilingParams(**doc["params"]), profile)
    assert doc["predicted_us"] == round(predict(t, profile), 4)
    lo, hi = doc["predicted_interval_us"]
    assert lo < doc["predicted_us"] < hi
    # narrower than the shipped profile's interval (cross-checked on other operators only)
    shipped = snap.answers.profile("Ascend910B1")
    assert (
        shipped.calibration
        and (hi / lo) < shipped.calibration["intervals"]["all"][1] / shipped.calibration["intervals"]["all"][0]
    )


def test_every_answer_of_a_device_table_carries_an_interval_that_says_its_basis(swept) -> None:
    """The 16-key table's answers: a measured variant at an untimed size takes the device's own band held
    out by key; a variant the sweep never measured, the band held out by variant (wider)."""
    from service.answers import Query
    from service.store import load_snapshot

    tmp, _, table = swept
    fit = table.device["fit"]
    assert fit["measured_variants"] == sorted({k.variant.label() for k in keys()})
    assert fit["interval_keys"]["measured"]["all"] == 16 and fit["interval_keys"]["unmeasured"]["all"] == 16
    answers = load_snapshot(tmp).answers
    measured = answers.resolve(Query(SOC.name, (20000,), Variant("float16", "mean", "none"), ()))
    untuned = answers.resolve(Query(SOC.name, (20000,), Variant("bfloat16", "sum", "none"), ()))
    for doc in (measured, untuned):
        lo, hi = doc["predicted_interval_us"]
        assert lo < doc["predicted_us"] < hi
    assert "this device's held-out" in measured["predicted_interval_basis"]
    assert "did not measure" in untuned["predicted_interval_basis"]
    wide = untuned["predicted_interval_us"][1] / untuned["predicted_interval_us"][0]
    assert wide >= measured["predicted_interval_us"][1] / measured["predicted_interval_us"][0]


def test_a_four_key_fit_still_holds_keys_and_variants_out() -> None:
    """Intervals came from 10 keys or more (a 4-key sweep's answers had none): now leave-one-key-out from
    3 keys, and variants from 2."""
    from model_tools.calibrate import fit_device
    from tuner.learning import measurements
    from tuner.study import tune

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    backend = SyntheticBackend(DEVICE, seed=3)
    four = keys()[:4]
    for key in four:
        tune(key, backend, storage, 8)
    summary = fit_device(measurements(storage, SOC, backend.name), SOC).summary()
    assert summary["keys"] == 4 and summary["interval_keys"]["measured"]["all"] == 4
    assert "all" in summary["intervals"] and "all" in summary["intervals_unmeasured"]
    assert summary["in_sample_band"][0] <= 1.0 <= summary["in_sample_band"][1]
    for held in ("measured", "unmeasured"):  # a class of 1-2 keys: its range, for the fallback to join
        counts, few = summary["interval_keys"][held], summary["intervals_few_keys"][held]
        assert set(few) == {c for c, k in counts.items() if 0 < k < 3}, (held, counts, few)
        assert all(0 < lo <= hi for lo, hi in few.values())


def test_socs_shows_the_profile_answers_use(swept) -> None:
    """GET /socs over a device-tuned table: its fitted profile (hash and all), as /tiling answers with it."""
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    tmp, _, _ = swept
    with TestClient(create_app(Settings(tables_dir=tmp, reload_interval_s=0))) as client:
        socs = {s["name"]: s for s in client.get("/socs").json()}
    fitted = profile_from_json(load_table(tmp / "Ascend910B2.json").device["profile"])
    assert socs["Ascend910B2"]["profile_hash"] == fitted.profile_hash != SOC.profile_hash
    assert socs["Ascend910B2"]["device_fitted"] and socs["Ascend910B2"]["hbm_gbps"] == fitted.hbm_gbps
    assert not socs["Ascend910B1"]["device_fitted"]
    assert socs["Ascend910B1"]["profile_hash"] == load_soc("Ascend910B1").profile_hash


def test_the_exported_header_uses_the_devices_profile_and_its_fit(swept, tmp_path: Path) -> None:
    """The build gets the device's fit whole, to the bit: the residual's factors (or the knob correction's,
    its core-count factors included: they were once dropped with the table's JSON)."""
    tmp, _, _ = swept
    from tuner.export_header import export_header

    out = tmp_path / "bce_grad_tuned_table.h"
    export_header(tmp, out)
    text = out.read_text()
    assert "(fitted on the device)" in text
    fitted = profile_from_json(load_table(tmp / "Ascend910B2.json").device["profile"])
    name, want = (("ResidualFactor", fitted.residual.table()) if not fitted.residual.identity
                  else ("CoreFactor", fitted.knob_correction.cores))  # fmt: skip
    exported = re.search(rf"kSoc0{name}\[\] = \{{([^}}]*)\}}", text)
    assert exported and tuple(float(x) for x in exported.group(1).split(",")) == tuple(want)
    assert any(f != 1.0 for f in want)


def run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=600)


def test_records_round_trip_through_calibrate_and_replay(swept, tmp_path: Path) -> None:
    _, records, table = swept
    lines = records.read_text().splitlines()
    again = sum(1 for line in lines if json.loads(line).get("again"))  # a second look's, superseding
    assert len(lines) - again == sum(e.trials for e in table.entries)  # one record per measured configuration
    rec = json.loads(lines[0])
    assert {"predicted_us", "predicted_device_us", "samples", "key"} <= set(rec)
    out = tmp_path / "profiles" / "Ascend910B2.json"
    r = run("model_tools", "calibrate", "--soc", "Ascend910B2", "--records", str(records), "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["median"] < summary["median_before"] and summary["keys"] == len(keys())
    calibrated = profile_from_json(json.loads(out.read_text()))  # with its residual, or its correction
    assert calibrated.residual.identity != calibrated.knob_correction.identity
    r = run("tuner", "replay", "--records", str(records), "--budgets", "8", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {row["strategy"] for row in doc["rows"]} == {"race", "tpe"} and doc["keys"] == len(keys())
    assert doc["answered"]["recorded"] > 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n" + '{"kernel": {"kind": "bce_grad", "dtype": "float16"}, "shape": [8]}\n')
    for module, args in (
        ("model_tools", ["calibrate", "--records", str(bad)]),
        ("tuner", ["replay", "--records", str(bad)]),
    ):
        r = run(module, *args)
        assert r.returncode == 2 and "bad.jsonl:2" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_cpu_twin_goes_through_the_device_loop(tmp_path: Path) -> None:
    """A real clock timing the real kernel source: the race, the records, the learner's fit and a table
    that carries it (what the NPU backend does, with the twin in its place)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    ks = [StudyKey(SOC.name, Variant("float32", "none", "none"), n) for n in (2048, 8192, 32768, 131072)]
    table = run_sweep(ks, CpuTwinBackend(), storage, 8, tmp_path / "Ascend910B2.json", False,
                      records=RecordLog(tmp_path / "runs.jsonl"))  # fmt: skip
    assert len(table.entries) == 4 and table.backend == "cpu"
    assert table.device is not None and table.device["fit"]["cases"] >= 24
    assert load_table(tmp_path / "Ascend910B2.json").device == table.device


def test_two_workers_on_one_storage_race_each_key_once_and_write_the_same_table(tmp_path: Path) -> None:
    """Two sweep workers (two NPUs of a host, or two hosts) on one storage: a key another worker is
    racing is left to it and its entry collected; every key is raced by one worker; both learn from all
    measurements and write the same table."""
    db = f"sqlite:///{tmp_path / 'shared.db'}"
    args = ["sweep", "--soc", "Ascend910B2", "--backend", "synthetic", "--seed", "4", "--dtypes", "float16,float32",
            "--reductions", "none,mean", "--weights", "none", "--sizes", "20000,3000000", "--trials", "10",
            "--storage", db, "--no-progress"]  # fmt: skip
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tuner", *args, "--out", str(tmp_path / f"{w}.json")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for w in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    a, b = (json.loads((tmp_path / f"{w}.json").read_text()) for w in ("a", "b"))
    assert a["entries"] == b["entries"] and len(a["entries"]) == 8
    assert a["device"]["fit"]["cases"] == b["device"]["fit"]["cases"]
    storage = open_storage(db)
    studies = [s for s in storage.get_all_studies() if "key" in s.user_attrs]  # (not the second looks' claims)
    assert len({s.user_attrs["owner"] for s in studies}) == 2  # both workers raced keys
    early = [s for s in studies if s.user_attrs["model_keys"] < RacePlan().settled_keys]
    assert early and all("second_look" in s.user_attrs for s in early)  # each key raced on an unsettled model
    assert not any("second_look" in s.user_attrs for s in studies if s not in early)
    assert sum(s.study_name.endswith("/look") for s in storage.get_all_studies()) == len(early)  # one claim each
    for s in studies:
        knobs = [knobs_of(t) for t in storage.get_all_trials(s._study_id, deepcopy=False)]
        assert len(knobs) == len(set(knobs)) <= 10, s.study_name  # no configuration measured twice


def test_records_hold_every_sample_the_learner_fits(tmp_path: Path) -> None:
    """A raced key's records carry each configuration's samples from its rounds too, and the median the
    sweep's learner fits to, so ``calibrate --records`` fits what the sweep fitted (records once kept only
    the first 5 samples, while the learner used all)."""
    from tuner.learning import measurements
    from tuner.study import tune

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    backend = SyntheticBackend(DEVICE, seed=5)
    log = RecordLog(tmp_path / "runs.jsonl")
    tune(keys()[0], backend, storage, 10, records=log, strategy="race")
    recs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    learnt = {
        tuple(m.launches[0].params.as_dict().values()): m.measured_us for m in measurements(storage, SOC, backend.name)
    }
    assert len(recs) == len(learnt) and any(len(r["samples"]) > 5 for r in recs)  # some were raced further
    for r in recs:
        assert r["measured_us"] == pytest.approx(learnt[tuple(r["params"].values())], rel=1e-12)
        assert r["measured_us"] == pytest.approx(float(np.median(r["samples"])), rel=1e-12)


def test_a_resumed_race_records_what_its_interrupted_start_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A race whose worker stopped mid-way (records are written at a race's end) and a worker that resumes it:
    the records hold every configuration the learner fits to, the first attempt's that were not raced again
    included, each at the learner's median."""
    import tuner.study
    from model_tools.calibrate import read_records
    from tuner.learning import measurements
    from tuner.study import tune

    class Stopped(Exception):
        pass

    class StopsAfter:
        """The stand-in device, until its worker stops (a killed process) after `after` samples."""

        def __init__(self, inner: SyntheticBackend, after: int) -> None:
            self.inner, self.after, self.samples = inner, after, 0
            self.name, self.deterministic, self.runs_kernel = inner.name, inner.deterministic, inner.runs_kernel

        def sample(self, tiling: object) -> float:
            self.samples += 1
            if self.samples > self.after:
                raise Stopped
            return self.inner.sample(tiling)  # type: ignore[arg-type]

        def flush_l2(self) -> None:
            self.inner.flush_l2()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    monkeypatch.setattr(tuner.study, "STALE_S", 0.0)  # the stopped worker's heartbeat is stale at once
    storage = optuna.storages.InMemoryStorage()
    backend = SyntheticBackend(DEVICE, seed=5)
    path = tmp_path / "runs.jsonl"
    with pytest.raises(Stopped):
        tune(keys()[0], StopsAfter(backend, 60), storage, 12, records=RecordLog(path), strategy="race")
    assert not path.exists()  # nothing recorded before the race's end
    # resumed on a model that ranks the configurations otherwise (another worker's, fitted on more keys): some of
    # the first attempt's are not proposed again
    other = DeviceModel(
        replace(SOC, hbm_gbps=0.1 * SOC.hbm_gbps, vector_start_cycles=40 * SOC.vector_start_cycles), 0.05
    )
    tune(keys()[0], backend, storage, 12, records=RecordLog(path), model=other, strategy="race")
    learnt = {
        tuple(m.launches[0].params.as_dict().values()): m.measured_us for m in measurements(storage, SOC, backend.name)
    }
    recorded = {tuple(m.launches[0].params.as_dict().values()): m.measured_us for m in read_records([path], SOC)}
    assert recorded.keys() == learnt.keys() and len(learnt) >= 12
    for params, us in recorded.items():
        assert us == pytest.approx(learnt[params], rel=1e-12)


def test_a_second_looks_records_supersede_the_first_races(tmp_path: Path) -> None:
    """A second look samples some of a key's first-race configurations again: their new records (marked
    ``again``, with every sample) replace the first ones when read, so ``calibrate --records`` and
    ``replay`` read each configuration once at the median the sweep's learner fits to (the first race's
    records were once the only ones: their medians left out the look's samples)."""
    from model_tools.calibrate import read_records
    from tuner.learning import measurements
    from tuner.replay import replay_device

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    backend = SyntheticBackend(DEVICE, seed=5)
    path = tmp_path / "runs.jsonl"
    run_sweep(keys()[:2], backend, storage, 10, None, False, records=RecordLog(path))
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    again = [r for r in raw if r.get("again")]
    assert again and all(r["key"] in {a["key"] for a in raw if not a.get("again")} for r in again)
    learnt = {
        (m.key, tuple(m.launches[0].params.as_dict().values())): m.measured_us
        for m in measurements(storage, SOC, backend.name)
    }
    read = read_records([path], SOC)
    assert len(read) == len(learnt) == len(raw) - len(again)
    for m in read:
        assert m.measured_us == pytest.approx(learnt[m.key, tuple(m.launches[0].params.as_dict().values())], rel=1e-12)
    replayed = replay_device([path])
    assert sum(len(group) for group in replayed.recorded.values()) == len(learnt)


def test_the_learners_fit_is_what_the_table_the_service_and_the_explorer_predict_with(swept) -> None:
    """Bit for bit, over random configurations of both kernel modes: the learner's fitted profile (refitted
    from the sweep's storage), the table's document of it read back (what the service answers with:
    ``test_the_table_carries_the_fitted_profile_and_the_service_answers_from_it``) and the explorer's
    explanation. The residual the learner fitted is in it (or the correction's core-count factors, which
    were once dropped)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from model_tools.explain import explain
    from tuner.learning import Learner
    from tuner.storage import open_storage

    tmp, _, table = swept
    learnt = Learner(SOC, open_storage(f"sqlite:///{tmp / 'studies.db'}"), "synthetic").fit_device(folds=5).profile
    read_back = table.profile()  # its device document, read back
    assert read_back.hbm_gbps == learnt.hbm_gbps
    assert not learnt.residual.identity or any(f != 1.0 for f in learnt.knob_correction.cores)
    assert learnt.profile_hash == read_back.profile_hash

    @settings(max_examples=60, deadline=None)
    @given(
        st.sampled_from(["float32", "float16", "bfloat16"]),
        st.sampled_from(["grad", "fused"]),
        st.integers(1, 1 << 24),
        st.sampled_from([512, 1024, 2048, 8192]),
        st.integers(1, 4),
        st.integers(1, 40),
        st.integers(1, 48),
    )
    def check(dtype: str, mode: str, n: int, block: int, bn: int, tile: int, cores: int) -> None:
        v = Variant(dtype, "mean", "none", mode=mode)
        try:
            t = compute_tiling([n], v, TilingParams(block, bn, 512 * tile, cores), learnt)
        except Exception:  # noqa: BLE001  (a configuration that does not tile: nothing to compare)
            return
        us = predict(t, learnt)
        assert predict(t, read_back) == us
        assert explain(t, read_back, landscape=False).predicted_us == round(us, 4)

    check()


def test_the_intervals_hold_the_devices_time_about_as_often_as_they_claim(swept) -> None:
    """How often, not only that they exist: the table's answers at sizes its sweep never timed (x0.61 and
    x1.37 of every key) and for variants it never measured, against the stand-in device's noise-free time.
    The bands claim 80% (10th to 90th percentile); held to at least 65% (one device, 32 and 24 answers; the
    benchmark, benchmarks/interval_coverage.py, runs five devices and reports over-coverage), and a band
    that holds by being wide fails: the bands are at most 6% (untimed sizes) and 7% (untuned variants) wide, median."""
    from tiling_model.confidence import interval
    from tiling_model.pick import model_best, refit_tiling

    _, _, table = swept
    profile = table.profile()

    widths: list[float] = []

    def holds(t) -> bool:  # noqa: ANN001
        us = predict(t, profile)
        band = interval(t, profile, us)
        widths.append((band.hi_us - band.lo_us) / us)
        return band.lo_us <= DEVICE.truth_us(t) <= band.hi_us

    untimed = [holds(refit_tiling([int(e.size * f)], e.variant, profile, e.tiling_params()))
               for e in table.entries for f in (0.61, 1.37)]  # fmt: skip
    others = [Variant(d, r, w) for d in ("bfloat16", "float32") for r in ("sum",) for w in ("none", "full")]
    untuned = [
        holds(model_best(n, v, profile)) for v in others for n in (3000, 70000, 1 << 20, 5 << 20, 1 << 23, 9 << 22)
    ]
    # measured with the residual: 32 of 32 and 24 of 24, the bands 4.6% and 5.4% wide (median); with the knob
    # correction alone 30 of 32 and 21 of 24. Seeded, so a change of the bands moves them
    assert statistics.median(widths[: len(untimed)]) <= 0.06 and statistics.median(widths[len(untimed) :]) <= 0.07
    assert statistics.mean(untimed) >= 0.65, untimed
    assert statistics.mean(untuned) >= 0.65, untuned


def test_the_cli_stops_early_where_it_races_and_says_so_where_it_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--stop-early`` is the race's: a sweep on the (deterministic) model backend searches by TPE and refuses
    it by name; on a timed backend its studies record it (a sweep with it does not resume studies made without,
    nor one without it studies made with it)."""
    from tuner.cli import main

    args = ["sweep", "--soc", "Ascend910B2", "--dtypes", "float32", "--reductions", "none", "--weights", "none",
            "--sizes", "65536", "--trials", "6", "--no-progress", "--out", str(tmp_path / "t.json")]  # fmt: skip
    assert main([*args, "--storage", f"sqlite:///{tmp_path / 'm.db'}", "--stop-early"]) == 2
    assert "--stop-early stops the race" in capsys.readouterr().err
    db = tmp_path / "s.db"
    assert main([*args, "--storage", f"sqlite:///{db}", "--backend", "synthetic", "--seed", "3", "--stop-early"]) == 0
    (study,) = (s for s in open_storage(f"sqlite:///{db}").get_all_studies() if "key" in s.user_attrs)
    assert study.user_attrs["sweep"]["stop_early"] is True
    full = ["--storage", f"sqlite:///{tmp_path / 'f.db'}", "--backend", "synthetic", "--seed", "3"]
    assert main([*args, *full]) == 0  # every trial spent: not resumed as a sweep that stops early
    assert main([*args, *full, "--stop-early"]) == 2 and "stop_early=False (this run: True)" in capsys.readouterr().err
    stopped = ["--storage", f"sqlite:///{db}", "--backend", "synthetic", "--seed", "3"]
    assert main([*args, *stopped]) == 2 and "stop_early=True (this run: False)" in capsys.readouterr().err


def test_keys_raced_before_the_model_settled_get_a_second_look_within_their_budget(swept) -> None:
    """The sweep's first keys (raced on a model fitted on fewer than ``settled_keys`` keys) race K trials fewer;
    once every key is done, a second look spends those K on the whole sweep's model: every key ends at its
    budget, the look measures only configurations its first race had not, and records what it did; a key
    raced on a settled model is never looked at, and asking again answers the entry as it stands."""
    from tuner.study import look_again

    tmp, _, table = swept
    plan = RacePlan()
    storage = open_storage(f"sqlite:///{tmp / 'studies.db'}")
    assert [e.trials for e in table.entries] == [16] * len(table.entries)
    studies = {s.study_name: s for s in storage.get_all_studies() if "key" in s.user_attrs}
    early = [s for s in studies.values() if s.user_attrs["model_keys"] < plan.settled_keys]
    assert len(early) == plan.settled_keys  # the shipped model until 24 measurements, then fits of < 6 keys
    for s in studies.values():
        look = s.user_attrs.get("second_look")
        assert (look is not None) == (s in early), s.study_name
        trials = storage.get_all_trials(s._study_id, deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        knobs = [knobs_of(t) for t in trials]
        assert len(knobs) == len(set(knobs)) == 16  # none measured twice
        if look is not None:
            assert look["trials"] == plan.second_look and look["model_keys"] >= plan.settled_keys
    backend = SyntheticBackend(DEVICE, seed=2)
    model = DeviceModel(SOC, 0.02)
    for key in keys():
        entry = next(e for e in table.entries if (e.variant, e.size) == (key.variant, key.size))
        again = look_again(key, backend, storage, 16, model)
        assert (again is not None) == (key.study_name(backend.name) in {s.study_name for s in early})
        assert again is None or again == entry
    assert backend.samples == 0  # nothing measured again


def test_the_cli_takes_a_second_look_where_it_races_and_never_resumes_across_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--second-look K`` is the race's (the model backend's TPE refuses it by name); a sweep does not resume
    studies made with another K (their first races kept other trials back)."""
    from tuner.cli import main

    args = ["sweep", "--soc", "Ascend910B2", "--dtypes", "float32", "--reductions", "none", "--weights", "none",
            "--sizes", "65536", "--trials", "8", "--no-progress", "--out", str(tmp_path / "t.json")]  # fmt: skip
    assert main([*args, "--storage", f"sqlite:///{tmp_path / 'm.db'}", "--second-look", "3"]) == 2
    assert "--second-look is the race's" in capsys.readouterr().err
    timed = [*args, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--backend", "synthetic", "--seed", "3"]
    assert main(timed) == 0
    (study,) = (s for s in open_storage(f"sqlite:///{tmp_path / 's.db'}").get_all_studies() if "key" in s.user_attrs)
    assert study.user_attrs["second_look"]["trials"] == 6 and json.loads((tmp_path / "t.json").read_text())[
        "entries"][0]["trials"] == 8  # fmt: skip
    assert main([*timed, "--second-look", "0"]) == 2
    assert "second_look=6 (this run: 0)" in capsys.readouterr().err


def test_a_second_look_another_worker_claimed_is_waited_for_and_taken_over_once_it_stops_beating() -> None:
    """Two workers on one storage: the one that created ``<study>/look`` looks, the other waits for its result
    (measuring nothing); a claim whose worker stopped beating (STALE_S) is taken over."""
    import threading

    from tuner.study import look_again, tune

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    backend = SyntheticBackend(DEVICE, seed=3)
    waited, taken = keys()[0], keys()[1]
    for key in (waited, taken):
        tune(key, backend, storage, 4, strategy="race")  # on the shipped model: due a look
    fitted = DeviceModel(SOC, 0.02)
    name = waited.study_name(backend.name)
    claim = optuna.create_study(study_name=f"{name}/look", storage=storage)
    claim.set_user_attr("heartbeat", time.time())
    study = optuna.load_study(study_name=name, storage=storage)
    entry = dict(study.user_attrs["entry"]) | {"tuned_us": 1.0}

    def other_worker_done() -> None:
        time.sleep(0.3)
        study.set_user_attr("entry", entry)
        study.set_user_attr("second_look", {"model_keys": 8, "trials": 4})

    threading.Thread(target=other_worker_done).start()
    before = backend.samples
    got = look_again(waited, backend, storage, 8, fitted)
    assert got is not None and got.tuned_us == 1.0 and backend.samples == before
    stale = optuna.create_study(study_name=f"{taken.study_name(backend.name)}/look", storage=storage)
    stale.set_user_attr("heartbeat", 0.0)
    got = look_again(taken, backend, storage, 8, fitted)
    assert got is not None and got.trials == 8 and backend.samples > before
    claim = optuna.load_study(study_name=f"{taken.study_name(backend.name)}/look", storage=storage)
    raced = optuna.load_study(study_name=taken.study_name(backend.name), storage=storage)
    assert claim.user_attrs["heartbeat"] >= raced.user_attrs["heartbeat"]  # it beats as it measures: not taken over


def test_the_learner_reads_again_only_the_studies_that_changed(swept, tmp_path: Path) -> None:
    """A sweep's learner refits after every key on every measurement in the storage; it reads a study's trials
    again only where the study's attributes changed (a race's heartbeat before each measurement, its samples at
    its end), and what it reads is ``measurements``: the same cases in the same order."""
    import sqlite3

    from tuner.learning import StoredMeasurements, measurements

    tmp, _, _ = swept
    # the fixture's storage stays as the sweep left it: copied whole by SQLite's backup (the file alone misses
    # what its write-ahead log has not checkpointed yet)
    with sqlite3.connect(tmp / "studies.db") as src, sqlite3.connect(tmp_path / "studies.db") as dst:
        src.backup(dst)
    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    reads: list[int] = []

    class Counting:  # the storage, counting the studies whose trials are read
        def __getattr__(self, name: str) -> object:
            return getattr(storage, name)

        def get_all_trials(self, study_id: int, *args: object, **kwargs: object) -> object:
            reads.append(study_id)
            return storage.get_all_trials(study_id, *args, **kwargs)  # type: ignore[arg-type]

    def cases(ms: list) -> list[tuple[str, float, str]]:
        return [(m.source, m.measured_us, m.key) for m in ms]

    backend = SyntheticBackend(DEVICE, seed=2).name
    stored = StoredMeasurements(Counting(), SOC, backend)  # type: ignore[arg-type]
    first = stored.read()
    assert cases(first) == cases(measurements(storage, SOC, backend)) and len(first) >= 16 * 14
    assert len(reads) == len(set(reads)) == len(keys())  # each key's study once
    reads.clear()
    assert cases(stored.read()) == cases(first) and reads == []  # nothing changed: nothing read
    study = next(s for s in storage.get_all_studies() if "key" in s.user_attrs)
    a = study.user_attrs["key"]
    key = StudyKey(SOC.name, Variant(a["dtype"], a["reduction"], a["weight"]), int(a["size"]))
    loaded = optuna.load_study(study_name=study.study_name, storage=storage)
    knobs = {"config": [512, 1, 1536, 7]}  # a configuration no race took
    assert all(knobs_of(t)[3] != 7 for t in loaded.trials)
    template = loaded.trials[0]
    loaded.set_user_attr("heartbeat", time.time())  # as a race does before it measures
    loaded.add_trial(optuna.trial.create_trial(params=template.params, distributions=template.distributions,
                                               value=9.0, user_attrs=knobs))  # fmt: skip
    loaded.set_user_attr("race", study.user_attrs.get("race", {}) | {"512/1/1536/7": [9.0, 9.2, 8.8]})
    again = stored.read()
    assert reads == [study._study_id]  # only the study that changed
    assert cases(again) == cases(measurements(storage, SOC, backend)) and len(again) == len(first) + 1
    (new,) = [m for m in again if m.launches[0].params.core_num == 7]
    assert new.key == study.study_name and new.measured_us == 9.0  # the race's samples' median
    assert compute_tiling([key.size], key.variant, TilingParams(*knobs["config"]), SOC) == new.launches[0]

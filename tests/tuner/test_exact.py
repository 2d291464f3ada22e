"""--strategy exact (a deterministic backend's key: the default and the model's best measured once, the pick by
best_trial's rule): the entries TPE makes on the model backend, from a third of the trials; resumed from the
storage without measuring; refused where one sample is not the truth."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from tiling_model import Variant, load_soc
from tiling_model.tables import load_table
from tuner.backends import ModelBackend
from tuner.cli import main
from tuner.key import StudyKey
from tuner.storage import open_storage
from tuner.study import EXACT_TRIALS, tune
from tuner.trial_attrs import knobs_of

SOC = load_soc("Ascend910B2")
KEYS = [
    StudyKey(SOC.name, Variant(dtype, reduction, weight), size)
    for dtype, reduction, weight, size in (
        ("float32", "mean", True, 300_001),
        ("float16", "none", False, 1 << 20),
        ("bfloat16", "sum", True, 4096),
        ("int16", "none", False, 77_777),
        ("float32", "none", True, 1 << 26),
    )
]


class Counting(ModelBackend):
    """The model backend, counting what it is asked to time."""

    def __init__(self) -> None:
        super().__init__()
        self.samples = 0

    def sample(self, tiling):  # type: ignore[no-untyped-def,override]
        self.samples += 1
        return super().sample(tiling)


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> optuna.storages.RDBStorage:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return open_storage(f"sqlite:///{tmp_path_factory.mktemp('exact') / 's.db'}")


def test_the_exact_pick_is_the_entry_tpe_makes_from_its_seeds(storage) -> None:
    for key in KEYS:
        searched = tune(key, ModelBackend(), storage, 12, strategy="tpe")
        exact = tune(key, ModelBackend(), optuna.storages.InMemoryStorage(), 12, strategy="exact")
        assert dataclasses.replace(exact, trials=searched.trials) == searched, key.label()
        assert 1 <= exact.trials <= EXACT_TRIALS


def test_an_exact_key_is_stored_with_its_measurements_and_read_back_without_measuring(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    key, backend = KEYS[0], Counting()
    first = tune(key, backend, storage, 1, strategy="exact")
    study = optuna.load_study(study_name=key.study_name("model"), storage=storage)
    measured = [knobs_of(t) for t in study.trials]
    assert len(measured) == len(set(measured)) == first.trials and backend.samples == first.trials + 1  # + the seed
    assert tuple(first.params.values()) in measured  # default's own measurement
    again = tune(key, backend, storage, 1, strategy="exact")
    assert again == first and backend.samples == first.trials + 1  # nothing measured again


def test_a_stopped_exact_key_resumes_from_what_it_measured(tmp_path: Path) -> None:
    from tiling_model import MeasurementError

    class StopsAfter(Counting):  # a worker stopped before the seed default's measurement: no entry stored
        def sample(self, tiling):  # type: ignore[no-untyped-def,override]
            if self.samples == whole.trials:
                raise MeasurementError("stopped")
            return super().sample(tiling)

    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    key = KEYS[1]
    whole = tune(key, ModelBackend(), optuna.storages.InMemoryStorage(), 1, strategy="exact")
    with pytest.raises(MeasurementError):
        tune(key, StopsAfter(), storage, 1, strategy="exact")
    study = optuna.load_study(study_name=key.study_name("model"), storage=storage)
    assert "entry" not in study.user_attrs and len(study.trials) == whole.trials
    backend = Counting()
    assert tune(key, backend, storage, 1, strategy="exact") == whole
    assert backend.samples == 1 and len(study.trials) == whole.trials  # the seed default only; no trial twice


def test_exact_is_refused_where_one_sample_is_not_the_truth(storage) -> None:
    with pytest.raises(ValueError, match="exact measures each configuration once"):
        tune(KEYS[0], ModelBackend(noise=0.02, seed=1), storage, 4, strategy="exact")


def test_the_cli_sweeps_exact_and_refuses_the_flags_of_a_search(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    base = ["sweep", "--soc", "Ascend910B2", "--dtypes", "float32", "--reductions", "none,mean", "--weights", "none",
            "--sizes", "4096,1048576", "--strategy", "exact", "--no-progress"]  # fmt: skip
    out = tmp_path / "t.json"
    assert main([*base, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--out", str(out)]) == 0
    table = load_table(out)
    assert len(table.entries) == 4 and table.trials_per_study == EXACT_TRIALS
    capsys.readouterr()
    for extra, named in ((["--trials", "12"], "--trials"), (["--patience", "3"], "--patience"),
                         (["--confirm-top", "2"], "--confirm-top"), (["--noise", "0.05"], "noisy")):  # fmt: skip
        code = main([*base, *extra, "--storage", f"sqlite:///{tmp_path / 'x.db'}", "--out", str(tmp_path / "x")])
        err = capsys.readouterr().err
        assert code == 2 and named in err and "exact" in err, (extra, err)
        assert not (tmp_path / "x").exists() and not (tmp_path / "x.db").exists()  # nothing written


def test_auto_takes_the_exact_pick_on_a_deterministic_backend_unless_a_flag_asks_for_a_search(tmp_path: Path) -> None:
    base = ["sweep", "--soc", "Ascend910B2", "--dtypes", "float32", "--reductions", "none", "--weights", "none",
            "--sizes", "4096,1048576", "--no-progress"]  # fmt: skip
    runs = {"auto": [], "auto, --trials 6": ["--trials", "6"], "exact": ["--strategy", "exact"],
            "auto, --noise": ["--noise", "0.02"]}  # fmt: skip
    studies = {}
    for name, extra in runs.items():
        db = tmp_path / f"{len(studies)}.db"
        assert (
            main([*base, *extra, "--storage", f"sqlite:///{db}", "--out", str(tmp_path / f"{len(studies)}.json")]) == 0
        )
        studies[name] = optuna.load_study(study_name=optuna.get_all_study_names(f"sqlite:///{db}")[0],
                                          storage=f"sqlite:///{db}")  # fmt: skip
    settings = {name: s.user_attrs["sweep"] for name, s in studies.items()}
    assert settings["auto"]["strategy"] == "exact" and settings["auto"]["trials"] == EXACT_TRIALS
    assert settings["auto"] == settings["exact"]  # one sweep: the storage of either resumes the other
    assert len(studies["auto"].trials) <= EXACT_TRIALS
    assert settings["auto, --trials 6"]["strategy"] == "auto" and len(studies["auto, --trials 6"].trials) == 6  # TPE
    assert settings["auto, --noise"]["strategy"] == "auto"  # a noisy backend: not exact

"""Two sweep workers on one PostgreSQL finish the sweep together: nothing lost, nothing run twice,
and the table equals a single worker's. ``make test`` starts the server as root where postgresql is
installed (``.ci/with-services.sh``) and sets BCETUNE_TEST_POSTGRES; without it this test skips."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from tuner.trial_attrs import knobs_of

URL = os.environ.get("BCETUNE_TEST_POSTGRES")
pytestmark = [
    pytest.mark.database,
    pytest.mark.skipif(
        not URL,
        reason="BCETUNE_TEST_POSTGRES not set (make test starts PostgreSQL as root where postgresql is installed)",
    ),
]

SWEEP = [
    "--soc",
    "Ascend910B3",
    "--dtypes",
    "float16,int32",
    "--reductions",
    "none,mean",
    "--weights",
    "true,false",
    "--sizes",
    "1000,300000,50000000",
    "--trials",
    "10",
    "--no-progress",
]


@pytest.fixture()
def database() -> str:
    """A fresh database per test on the CI server, dropped afterwards."""
    name = f"bcetune_{uuid.uuid4().hex[:10]}"
    admin = sqlalchemy.create_engine(URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    yield URL.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as c:
        c.execute(sqlalchemy.text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.dispose()


def sweep(storage: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tuner", "sweep", *SWEEP, "--storage", storage, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def entries(path: Path) -> list[dict]:
    return list(json.loads(path.read_text())["entries"])


def test_two_workers_share_the_studies_and_match_one_worker(database: str, tmp_path: Path) -> None:
    a, b = sweep(database, tmp_path / "a.json"), sweep(database, tmp_path / "b.json")
    for p in (a, b):
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    single = sweep(f"sqlite:///{tmp_path / 'single.db'}", tmp_path / "single.json")
    _, err = single.communicate(timeout=600)
    assert single.returncode == 0, err

    expected = entries(tmp_path / "single.json")
    assert len(expected) == 2 * 2 * 3 + 1 * 2 * 3  # float16: none, mean; int32: none; x weight x sizes
    assert entries(tmp_path / "a.json") == expected  # trials too: each entry made of exactly its 10
    assert entries(tmp_path / "b.json") == expected
    assert {e["trials"] for e in expected} == {10}

    storage = optuna.storages.RDBStorage(database)
    summaries = optuna.get_all_study_summaries(storage)
    assert len(summaries) == len(expected)  # one study per key: none created twice
    for s in summaries:
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        assert 10 <= len(done) <= 11, s.study_name  # the MaxTrials stop overshoots by at most one per extra worker
        assert not study.get_trials(states=(optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL))
        measured = [t for t in done if "duplicate_of" not in t.user_attrs]
        configs = [knobs_of(t) for t in measured]
        # a configuration is timed again only when both workers proposed it at the same moment
        assert len(configs) - len(set(configs)) <= 1, s.study_name
    storage.remove_session()


def test_an_interrupted_sweep_resumes(database: str, tmp_path: Path) -> None:
    p = sweep(database, tmp_path / "x.json")
    storage = optuna.storages.RDBStorage(database)
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline and len(optuna.get_all_study_summaries(storage)) < 3:
        time.sleep(0.2)
    assert p.poll() is None, "the sweep ended before it could be interrupted"
    p.kill()
    p.wait()
    started = len(optuna.get_all_study_summaries(storage))
    storage.remove_session()
    assert 3 <= started < 18 and not (tmp_path / "x.json").exists()  # killed mid-sweep: no table yet
    again = sweep(database, tmp_path / "y.json")
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    single = sweep(f"sqlite:///{tmp_path / 'single.db'}", tmp_path / "single.json")
    single.communicate(timeout=600)
    # Every key is tuned, each as well as by an uninterrupted sweep. The configuration may differ where
    # several tie exactly: a trial killed mid-study stays RUNNING, so the resumed study's trial order (the
    # last tie-break) and its samples can differ (see docs/manual.md, "Tune").
    resumed, whole = entries(tmp_path / "y.json"), entries(tmp_path / "single.json")
    assert [key_of(e) for e in resumed] == [key_of(e) for e in whole]
    for r, w in zip(resumed, whole, strict=True):
        assert r["tuned_us"] <= w["tuned_us"] * 1.001 and r["seed_default_us"] == w["seed_default_us"], (r, w)


def key_of(e: dict) -> tuple:
    return (e["dtype"], e["reduction"], e["weight"], e["pos_weight"], e["wrt"], e["size"])

"""What a sweep's trials cost its storage: SQL statements and wall time per trial.

Two sweeps of ``--keys`` keys of the 910B2 sweep at ``--trials`` trials, each on a new storage: the model
backend's TPE (what ``make sweep`` runs for the shipped tables; every trial a live Optuna trial that writes its
attributes as it goes) and the race on the ``realised:3`` stand-in device (a timed backend's search: each
measured configuration added as a finished trial, the learner refitting after every key). On a new SQLite file
(the CLI's default storage, opened as the CLI opens it) and, with ``--postgres URL`` (a server's maintenance
database, e.g. ``postgresql+psycopg2://postgres@127.0.0.1:5432/postgres``; a new database is made per run and
dropped after), on PostgreSQL. Statements are counted at the driver (SQLAlchemy's ``before_cursor_execute``):
they do not depend on the machine's load, the wall times do (report ratios measured side by side). "in storage":
the wall time spent inside the RDB storage's methods (Optuna's ORM and the database), per trial written.

Run: ``.venv/bin/python benchmarks/trial_writes.py`` (about 2 minutes on SQLite at the defaults).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from search_efficiency import pick_keys

from tiling_model import load_soc
from tuner.backends import ModelBackend
from tuner.storage import open_storage
from tuner.sweep import run_sweep
from tuner.synthetic import SyntheticBackend, SyntheticDevice

SOC = "Ascend910B2"


@contextmanager
def new_storage(kind: str, postgres: str) -> Iterator[tuple[optuna.storages.RDBStorage, str]]:
    """A new, empty storage of ``kind`` (sqlite or postgres), dropped after."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as d:
            yield open_storage(f"sqlite:///{Path(d) / 'bench.db'}"), "SQLite file"
        return
    name = f"bench_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    storage = open_storage(postgres.rsplit("/", 1)[0] + f"/{name}")
    try:
        yield storage, "PostgreSQL"
    finally:
        storage.engine.dispose()
        with admin.connect() as c:
            c.execute(sqlalchemy.text(f"DROP DATABASE {name}"))
        admin.dispose()


class StorageClock:
    """Seconds spent inside the RDB storage's methods (Optuna's ORM and the database; a method another calls is
    counted once, in its caller), patched on the class for the run."""

    def __init__(self) -> None:
        self.seconds, self._depth, self._saved = 0.0, 0, {}
        for name, method in vars(optuna.storages.RDBStorage).items():
            if callable(method) and not name.startswith("__"):
                self._saved[name] = method
                setattr(optuna.storages.RDBStorage, name, self._timed(method))

    def _timed(self, method: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - t0

        return timed

    def restore(self) -> None:
        for name, method in self._saved.items():
            setattr(optuna.storages.RDBStorage, name, method)


class Statements:
    """SQL statements an engine sends, counted at the driver."""

    def __init__(self, engine: sqlalchemy.Engine) -> None:
        self.count = 0
        sqlalchemy.event.listen(engine, "before_cursor_execute", self._one)

    def _one(self, *_: Any) -> None:
        self.count += 1


def sweep(search: str, kind: str, postgres: str, keys: int, trials: int) -> tuple[str, int, int, float, float]:
    """(storage, trials written, statements, seconds, seconds in the storage) of one sweep."""
    soc = load_soc(SOC)
    backend = ModelBackend() if search == "tpe" else SyntheticBackend(SyntheticDevice(soc, 3, shape="realised"), 0)
    with new_storage(kind, postgres) as (storage, text):
        statements, clock = Statements(storage.engine), StorageClock()
        t0 = time.perf_counter()
        try:
            run_sweep(pick_keys(keys), backend, storage, trials, None, progress=False)
        finally:
            clock.restore()
        seconds = time.perf_counter() - t0
        written = sum(len(storage.get_all_trials(s._study_id, deepcopy=False)) for s in storage.get_all_studies())
        return text, written, statements.count, seconds, clock.seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=12)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--searches", default="tpe,race", help="tpe (model backend), race (stand-in device)")
    ap.add_argument("--postgres", default="", help="a PostgreSQL server's maintenance database URL")
    a = ap.parse_args()
    searches = a.searches.split(",")
    if a.keys < 1 or a.trials < 5 or not set(searches) <= {"tpe", "race"}:
        ap.error("--keys 1 or more, --trials 5 or more, --searches among tpe,race")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kinds = ["sqlite"] + (["postgres"] if a.postgres else [])
    print(f"{a.keys} keys of the {SOC} sweep at {a.trials} trials, a new storage each")
    head = ("search", "storage", "trials", "statements", "a trial", "wall s", "ms a trial", "in storage")
    print("  {:<6} {:<12} {:>6} {:>10} {:>8} {:>7} {:>10} {:>10}".format(*head))
    for search in searches:
        for kind in kinds:
            text, written, count, seconds, stored = sweep(search, kind, a.postgres, a.keys, a.trials)
            print(f"  {search:<6} {text:<12} {written:>6} {count:>10} {count / written:>8.1f} {seconds:>7.1f} "
                  f"{1000 * seconds / written:>10.1f} {1000 * stored / written:>7.1f} ms", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

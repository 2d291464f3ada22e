"""Optuna RDB storage: a SQLite file by default, any SQLAlchemy URL (PostgreSQL) for many workers."""

from __future__ import annotations

import sqlite3
import time
import warnings
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.trial import TrialState
from sqlalchemy import bindparam, event, text

DEFAULT_STORAGE = "sqlite:///bcetune-sweep.db"
#: Optuna's trial heartbeat: a running trial writes one every HEARTBEAT_S; one silent for GRACE_S is a trial
#: whose worker died (killed mid-trial), and ``optuna.storages.fail_stale_trials`` marks it FAIL. Other
#: workers then neither wait for it nor count it.
HEARTBEAT_S = 5
GRACE_S = 20
SQLITE_BUSY_S = 60.0


def _engine_kwargs(url: str) -> dict[str, Any]:
    """SQLite connections wait up to SQLITE_BUSY_S for a lock another worker holds (a schema being
    created, a commit) instead of failing at once with "database is locked"."""
    return {"connect_args": {"timeout": SQLITE_BUSY_S}} if url.startswith("sqlite") else {}


def _create(url: str, attempts: int = 6) -> optuna.storages.RDBStorage:
    """RDBStorage, retried: workers that start together on an empty database race to create its
    schema, and all but one see a duplicate type or table until the winner has committed."""
    for attempt in range(attempts):
        try:
            with warnings.catch_warnings():  # heartbeats are marked experimental since Optuna 2.9
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=_engine_kwargs(url), heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S
                )
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError) as e:
            # SQLite says it as an OperationalError ("table ... already exists", "database is locked")
            racing = not isinstance(e, sqlalchemy.exc.OperationalError) or any(
                words in str(e.orig) for words in ("already exists", "database is locked")
            )
            if attempt == attempts - 1 or not racing:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def open_storage(url: str = DEFAULT_STORAGE) -> optuna.storages.RDBStorage:
    """Open (creating if needed) the study database at ``url``.

    SQLite files get WAL journaling with synchronous=NORMAL: each trial commits several
    times, and the default rollback journal with a full fsync per commit doubles sweep time.
    """
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if path.parent and not path.parent.exists():
            raise ValueError(f"storage directory {path.parent} does not exist")
    try:
        storage = _create(url)
    except sqlalchemy.exc.SQLAlchemyError as e:
        reason = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
        raise ValueError(f"cannot open storage {url}: {reason}") from None
    if url.startswith("sqlite"):

        @event.listens_for(storage.engine, "connect")
        def _sqlite_pragmas(conn: Any, _record: Any) -> None:
            cur = conn.cursor()
            _wal(cur)
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        storage.engine.dispose()  # later connections get the pragmas
    return storage


def _wal(cur: Any, attempts: int = 20) -> None:
    """Switch the file to WAL journaling, once (the mode is stored in the file): connections that open a new
    database together all try, and SQLite refuses a journal-mode change with "database is locked" without
    waiting on its busy timeout (seen with 8 workers on a loaded machine), so a refused switch is retried."""
    for attempt in range(attempts):
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def fail_stale_trials(study: optuna.Study) -> list[int]:
    """Mark FAIL the RUNNING trials whose worker died; return their numbers.

    Optuna's ``fail_stale_trials`` fails a trial whose heartbeat has been silent for the storage's grace
    period, but skips one with no heartbeat at all (Optuna 5.1, ``RDBStorage._get_stale_trial_ids``): a
    worker killed between ``study.ask()`` and its heartbeat thread's first write leaves its trial RUNNING for
    ever, and a study waiting for its running trials waited to its limit (a resumed sweep hung 600 s in CI).
    Such a trial, started more than the grace period ago (a live one writes its first heartbeat within
    milliseconds of starting), is failed here too. Storages without heartbeats: nothing is failed.
    """
    storage = study._storage  # noqa: SLF001 - Optuna's own helpers take the study's storage the same way
    rdb = getattr(storage, "_backend", storage)  # a _CachedStorage wraps the RDBStorage
    if not isinstance(rdb, optuna.storages.RDBStorage) or rdb.heartbeat_interval is None:
        return []
    running = {t._trial_id: t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}  # noqa: SLF001
    if not running:
        return []
    with warnings.catch_warnings():  # fail_stale_trials is marked experimental since Optuna 2.9
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # the silent heartbeats
    still = {t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}  # noqa: SLF001
    failed = [t.number for i, t in running.items() if i not in still and storage.get_trial(i).state == TrialState.FAIL]
    grace = timedelta(seconds=rdb.grace_period or 2 * rdb.heartbeat_interval)
    cutoff = datetime.now() - grace  # datetime_start is the worker's local time, naive
    old = [i for i in still if (start := running[i].datetime_start) is not None and start < cutoff]
    if not old:
        return failed
    query = text("SELECT trial_id FROM trial_heartbeats WHERE trial_id IN :ids").bindparams(
        bindparam("ids", expanding=True)
    )
    with rdb.engine.connect() as conn:
        beating = {row[0] for row in conn.execute(query, {"ids": old})}
    for trial_id in old:
        if trial_id in beating:
            continue  # Optuna's rule judges it (above, once its heartbeat is a grace period old)
        try:
            if storage.set_trial_state_values(trial_id, TrialState.FAIL):
                failed.append(running[trial_id].number)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # finished meanwhile: it was alive after all
    return failed

"""Optuna RDB storage: a SQLite file by default, any SQLAlchemy URL (PostgreSQL) for many workers."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from sqlalchemy import event

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
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        storage.engine.dispose()  # later connections get the pragmas
    return storage

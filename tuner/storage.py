"""Optuna RDB storage: a SQLite file by default, any SQLAlchemy URL (PostgreSQL) for many workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from sqlalchemy import event

DEFAULT_STORAGE = "sqlite:///bcetune-sweep.db"


def open_storage(url: str = DEFAULT_STORAGE) -> optuna.storages.RDBStorage:
    """Open (creating if needed) the study database at ``url``.

    SQLite files get WAL journaling with synchronous=NORMAL: each trial commits several
    times, and the default rollback journal with a full fsync per commit doubles sweep time.
    """
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if path.parent and not path.parent.exists():
            raise ValueError(f"storage directory {path.parent} does not exist")
    storage = optuna.storages.RDBStorage(url)
    if url.startswith("sqlite"):

        @event.listens_for(storage.engine, "connect")
        def _sqlite_pragmas(conn: Any, _record: Any) -> None:
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        storage.engine.dispose()  # later connections get the pragmas
    return storage

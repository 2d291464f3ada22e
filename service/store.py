"""The tables the service serves, loaded whole, checked, and swapped atomically on reload.

A snapshot (tables + the cached answers built on them) is replaced in one assignment, so a request
sees either the old tables or the new ones, never a mix. A reload that fails (a corrupt file,
a schema error) leaves the old snapshot serving.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernel.sources import kernel_source_hash
from service.answers import CACHE_BYTES, CachedAnswers
from service.logs import LOGGER, event
from tiling_model import BadRequest, TableError, compute_tiling, known_socs, load_soc, validate
from tiling_model.tables import TuningTable, load_table

log = logging.getLogger(LOGGER)


@dataclass(frozen=True)
class LoadedTable:
    table: TuningTable
    path: Path
    invalid: tuple[str, ...]  # entries dropped because their tiling fails validation
    stale: tuple[str, ...]  # why the table no longer matches the running code (empty: fresh)

    def stale_reasons(self) -> list[str]:
        return list(self.stale)


@dataclass(frozen=True)
class Snapshot:
    tables: dict[str, LoadedTable]
    answers: CachedAnswers
    signature: tuple[tuple[str, int, int], ...]  # (name, size, mtime_ns) of each table file


#: A snapshot's signature when its directory changed while it was read: equal to no directory's state.
CHANGED_WHILE_READ: tuple[tuple[str, int, int], ...] = (("", -2, -2),)


def _signature(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """(name, size, mtime_ns) of each table file; a file that cannot be read for its state (a dangling
    link, a symlink loop) is in it as (name, -1, -1): a change too, but no error here."""
    out = []
    try:
        paths = sorted(directory.glob("*.json"))
    except OSError:
        return (("", -1, -1),)
    for p in paths:
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        except OSError:  # ELOOP, EACCES...: the reload says what it is
            out.append((p.name, -1, -1))
            continue
        out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _checked(table: TuningTable, path: Path, kernel_hash: str) -> LoadedTable:
    """Drop (and log) every entry whose tiling fails validation at its tuned size."""
    soc = table.profile()
    keep, invalid = [], []
    for e in table.entries:
        try:
            t = compute_tiling([e.size], e.variant, e.tiling_params(), soc)
            problems = [v.message for v in validate(t, soc)]
        except BadRequest as err:  # knobs no tiling can express (e.g. a 100-B block)
            problems = [str(err)]
        if problems:
            desc = f"{e.variant.label()}/n={e.size}"
            invalid.append(desc)
            event(
                log,
                logging.WARNING,
                "table entry fails validation; it will not be served",
                table=str(path),
                entry=desc,
                violations=problems,
            )
        else:
            keep.append(e)
    stale = []
    if table.device is None and table.soc_profile_hash != load_soc(table.soc).profile_hash:
        stale.append("SoC profile changed since tuning")  # a device-tuned table brings its own
    if table.kernel_hash != kernel_hash:
        stale.append("kernel sources changed since tuning")
    return LoadedTable(replace(table, entries=tuple(keep)), path, tuple(invalid), tuple(stale))


def load_snapshot(directory: Path, reload: bool = False, cache_bytes: int = CACHE_BYTES) -> Snapshot:
    """Every ``<SoC>.json`` in ``directory``; any unusable file raises TableError naming it. A reload
    is stricter than the start: it also refuses a directory with no table and a table none of whose
    entries validates (the tables serving now are better than those)."""
    if not directory.is_dir():
        raise TableError(f"{directory}: tables directory does not exist")
    signature = _signature(directory)
    kernel_hash = kernel_source_hash()
    tables: dict[str, LoadedTable] = {}
    for path in sorted(directory.glob("*.json")):
        if path.stem not in known_socs():
            raise TableError(f"{path}: file name is not a known SoC ({', '.join(known_socs())})")
        table = load_table(path)
        if table.soc != path.stem:
            raise TableError(f"{path}: holds SoC {table.soc!r}, but the file is named for {path.stem!r}")
        tables[table.soc] = _checked(table, path, kernel_hash)
        if reload and not tables[table.soc].table.entries:
            raise TableError(f"{path}: no entry validates ({len(tables[table.soc].invalid)} dropped)")
    if reload and not tables:
        raise TableError("the tables directory has no <SoC>.json table left")
    if _signature(directory) != signature:
        # Written to while it was read: what was read belongs to no state the watcher can compare, so it is
        # never taken for the one the directory is in (the next poll loads again). Kept as the state before
        # the read, a table written during it and removed after went unseen (a flaky CI run showed it).
        signature = CHANGED_WHILE_READ
    return Snapshot(tables, CachedAnswers({s: lt.table for s, lt in tables.items()}, cache_bytes), signature)


@dataclass(frozen=True)
class ReloadError:
    """The last reload refused: what went wrong, in which file (where one is named), when (Unix time)."""

    error: str
    file: str | None
    at: float


@dataclass
class TableStore:
    directory: Path
    cache_bytes: int = CACHE_BYTES
    snapshot: Snapshot = field(init=False)
    reloads: int = 0
    failed_reloads: int = 0
    last_error: ReloadError | None = None
    _refused_signature: tuple | None = None  # the directory state last refused: not retried until it changes
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.snapshot = load_snapshot(self.directory, cache_bytes=self.cache_bytes)  # start-up: a bad table is fatal
        for soc, lt in self.snapshot.tables.items():
            if lt.stale:
                event(log, logging.WARNING, "table is stale", soc=soc, reasons=list(lt.stale))

    def changed(self) -> bool:
        sig = _signature(self.directory)
        return sig != self.snapshot.signature and sig != self._refused_signature

    def reload(self, reason: str) -> bool:
        """Load the directory anew; swap it in if every file is good, else keep serving the old. Whatever a
        load raises (a bad table, and TypeError or RecursionError from a hostile JSON too) is a refusal,
        recorded in ``last_error`` and not retried until the directory changes. One reload at a time: a
        reload asked for while one runs is skipped (False), never queued."""
        if not self._lock.acquire(blocking=False):
            event(log, logging.WARNING, "table reload already running; this one skipped", reason=reason)
            return False
        try:
            signature = _signature(self.directory)
            try:
                new = load_snapshot(self.directory, reload=True, cache_bytes=self.cache_bytes)
            except Exception as e:  # noqa: BLE001 - any failure keeps the old tables and is reported
                self._refused_signature = signature
                self.failed_reloads += 1
                text = str(e) if isinstance(e, TableError | OSError) else f"{type(e).__name__}: {str(e)[:300]}"
                self.last_error = ReloadError(self.public(text), self._file_of(e), time.time())
                event(
                    log,
                    logging.ERROR,
                    "table reload refused; still serving the previous tables",
                    reason=reason,
                    error=str(e),
                )
                return False
            self.snapshot = new
            self.reloads += 1
            self.last_error = None
            self._refused_signature = None
            event(
                log,
                logging.INFO,
                "tables reloaded",
                reason=reason,
                socs=sorted(new.tables),
                entries=sum(len(t.table.entries) for t in new.tables.values()),
            )
            return True
        finally:
            self._lock.release()

    def _file_of(self, e: BaseException) -> str | None:
        """The table file a reload error names (relative to the tables directory), where it names one."""
        named = getattr(e, "filename", None) or next(
            (str(p) for p in sorted(self.directory.glob("*.json")) if str(p) in str(e)), None
        )
        return self.public(str(named)) if named else None

    def public(self, message: str) -> str:
        """``message`` without the server's directory (paths relative to the tables directory)."""
        for d in (str(self.directory.resolve()), str(self.directory)):
            message = message.replace(d + os.sep, "").replace(d, "the tables directory")
        return message

"""Tuned tiling tables: the file format the tuner writes and the service and builds read.

One JSON file per SoC. Entries are tuned at representative sizes; an entry serves every
element count in its size bucket, whose bounds are the geometric means between neighbouring
tuned sizes (the first bucket starts at 1, the last one is open-ended).
"""

from __future__ import annotations

import bisect
import json
import math
import os
import stat
import tempfile
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from tiling_model.errors import BadRequest, TableError
from tiling_model.soc import SocProfile, load_soc, profile_from_json
from tiling_model.tiling import KNOB_NAMES, TilingParams
from tiling_model.variant import WEIGHT_FORMS, Variant

#: 5: a table tuned on a device carries that device (its fitted SoC profile and the fit's summary).
#: 4: weight is a broadcast form ("full", "none", ...; was a boolean in 3). Versions 3 and 4 are
#: migrated on load (3: true -> "full", false -> "none"; both: no device); anything older is refused.
SCHEMA_VERSION = 5
MIGRATABLE_VERSIONS = (3, 4)
#: The fit's median |error| in a table's calibration summary: "median" since the calibration on every
#: measured operator (with "loo_median"), "median_abs_rel_error" in tables swept before it.
CALIBRATION_MEDIANS = ("median", "median_abs_rel_error")
TUNED_HEADER_NAME = "bce_grad_tuned_table.h"
PARAM_NAMES = KNOB_NAMES
#: The variant's fields as a table file spells them, flat, before the entry's own fields.
VARIANT_FIELDS = ("dtype", "reduction", "weight", "pos_weight", "wrt")
#: The kernel mode, spelled only where it is not the default (``grad``): tables of the requirement's kernel
#: read and write as before.
MODE_FIELD = "mode"
ENTRY_FIELDS = ("size", "params", "tuned_us", "seed_default_us", "trials", "spread_us")


def variant_order(v: Variant) -> tuple[str | bool, ...]:
    """The order tables list variants in (dtype, reduction, weight, pos_weight, wrt)."""
    return astuple(v)


@dataclass(frozen=True)
class TableEntry:
    variant: Variant
    size: int  # element count the entry was tuned at
    params: dict[str, int]
    tuned_us: float
    seed_default_us: float
    trials: int
    spread_us: float = 0.0  # interquartile range of the tuned configuration's samples (0 for the model)

    def tiling_params(self) -> TilingParams:
        return TilingParams(**self.params)

    def to_json(self) -> dict[str, Any]:
        """The flat object a table file holds: the variant's fields, then the entry's."""
        doc: dict[str, Any] = {name: getattr(self.variant, name) for name in VARIANT_FIELDS}
        if self.variant.mode != "grad":
            doc[MODE_FIELD] = self.variant.mode
        return doc | {name: getattr(self, name) for name in ENTRY_FIELDS}


@dataclass(frozen=True)
class TuningTable:
    soc: str
    soc_profile_hash: str
    kernel_hash: str
    backend: str
    created: str
    trials_per_study: int
    entries: tuple[TableEntry, ...]
    calibration: dict[str, Any] | None = None  # the SoC profile's calibration summary, if it was fitted
    versions: dict[str, str] = field(default_factory=dict)  # bcetune, optuna, numpy (and CANN, torch_npu on NPU)
    # The device the table was tuned on: {"profile": the SoC profile fitted on the sweep's measurements,
    # "fit": what that fit says (model_tools.calibrate.DeviceFit.summary)}; None for the model backend.
    device: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION
    _index: dict[Variant, tuple[list[int], list[TableEntry]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _profile: list[SocProfile] = field(default_factory=list, init=False, repr=False, compare=False)

    def profile(self) -> SocProfile:
        """The SoC profile this table's predictions and re-fits use: the device's it was tuned on, else
        the shipped one."""
        if not self._profile:
            self._profile.append(profile_from_json(self.device["profile"]) if self.device else load_soc(self.soc))
        return self._profile[0]

    def __post_init__(self) -> None:
        groups: dict[Variant, list[TableEntry]] = {}
        for e in self.entries:
            groups.setdefault(e.variant, []).append(e)
        for key, group in groups.items():
            group.sort(key=lambda e: e.size)
            # Each entry but the last serves n below its limit: the first integer past the geometric mean with the
            # next size (m * m > a * b, in integers: n is then nearer the next in log; at the mean, the smaller's).
            limits = [math.isqrt(a.size * b.size) + 1 for a, b in zip(group, group[1:], strict=False)]
            self._index[key] = (limits, group)

    def lookup(self, variant: Variant, n: int) -> TableEntry | None:
        """The entry whose size bucket holds ``n`` (None for n == 0 or an untuned variant)."""
        found = self._index.get(variant)
        if found is None or n <= 0:
            return None
        limits, group = found
        return group[bisect.bisect_right(limits, n)]

    def bucket_limits(self) -> list[tuple[TableEntry, int | None]]:
        """Every entry with the first element count past its bucket (None: open-ended), as integers
        that reproduce ``lookup`` exactly: entry i serves 1 <= n < limit (after entry i-1's limit)."""
        out: list[tuple[TableEntry, int | None]] = []
        for limits, group in self._index.values():
            out += [(e, limits[i] if i < len(limits) else None) for i, e in enumerate(group)]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "soc": self.soc,
            "soc_profile_hash": self.soc_profile_hash,
            "kernel_hash": self.kernel_hash,
            "backend": self.backend,
            "created": self.created,
            "trials_per_study": self.trials_per_study,
            "calibration": self.calibration,
            "versions": self.versions,
            "device": self.device,
            "entries": [e.to_json() for e in sorted(self.entries, key=lambda e: (*variant_order(e.variant), e.size))],
        }


def _require(cond: bool, where: str, problem: str) -> None:
    if not cond:
        raise TableError(f"{where}: {problem}")


def _entry_from_json(raw: Any, where: str) -> TableEntry:
    _require(isinstance(raw, dict), where, "entry is not an object")
    expected = set(VARIANT_FIELDS) | set(ENTRY_FIELDS) | ({MODE_FIELD} & set(raw))
    _require(set(raw) == expected, where, f"entry keys {sorted(raw)} differ from {sorted(expected)}")
    _require(
        raw["weight"] in WEIGHT_FORMS and not isinstance(raw["weight"], bool),
        where,
        f"weight is not one of {', '.join(WEIGHT_FORMS)}",
    )
    try:
        variant = Variant(raw["dtype"], raw["reduction"], raw["weight"], raw["pos_weight"], raw["wrt"],
                          raw.get(MODE_FIELD, "grad"))  # fmt: skip
    except BadRequest as e:
        raise TableError(f"{where}: {e}") from None
    _require(isinstance(raw["size"], int) and raw["size"] >= 1, where, "size is not a positive integer")
    params = raw["params"]
    _require(
        isinstance(params, dict) and set(params) == set(PARAM_NAMES),
        where,
        f"params must have exactly {', '.join(PARAM_NAMES)}",
    )
    for k, v in params.items():
        _require(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1, where, f"params.{k} is not a positive integer"
        )
    for k in ("tuned_us", "seed_default_us", "spread_us"):
        _require(isinstance(raw[k], int | float) and raw[k] >= 0, where, f"{k} is not a non-negative number")
    _require(isinstance(raw["trials"], int) and raw["trials"] >= 1, where, "trials is not a positive integer")
    return TableEntry(variant, **{k: raw[k] for k in ENTRY_FIELDS})


def migrate(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """A version 3 or 4 document as version 5 (a new dict; the input is left alone): weight true / false
    of version 3 becomes the form "full" / "none"; neither was tuned on a device (``device`` null)."""
    entries: Any = doc.get("entries")
    _require(isinstance(entries, list), where, "entries missing or not a list")
    out = []
    for i, e in enumerate(entries):
        _require(isinstance(e, dict), f"{where}: entries[{i}]", "entry is not an object")
        if doc["schema_version"] == 3:
            w = e.get("weight")
            _require(isinstance(w, bool), f"{where}: entries[{i}]", "weight is not a boolean (schema 3)")
            e = e | {"weight": "full" if w else "none"}
        out.append(e)
    return doc | {"schema_version": SCHEMA_VERSION, "entries": out, "device": None}


def table_from_json(doc: Any, where: str = "table") -> TuningTable:
    """Parse and check a table document (version 3 is migrated first); raises TableError naming the
    first problem."""
    _require(isinstance(doc, dict), where, "top level is not an object")
    if doc.get("schema_version") in MIGRATABLE_VERSIONS and not isinstance(doc.get("schema_version"), bool):
        doc = migrate(doc, where)
    _require(
        doc.get("schema_version") == SCHEMA_VERSION,
        where,
        f"schema_version {doc.get('schema_version')!r} is not {SCHEMA_VERSION} (nor a version this release "
        f"migrates: {', '.join(map(str, MIGRATABLE_VERSIONS))}); re-run `python -m tuner sweep`",
    )
    for k in ("soc", "soc_profile_hash", "kernel_hash", "backend", "created"):
        _require(isinstance(doc.get(k), str) and doc[k], where, f"{k} missing or not a string")
    _require(isinstance(doc.get("trials_per_study"), int), where, "trials_per_study missing or not an integer")
    _require(isinstance(doc.get("entries"), list), where, "entries missing or not a list")
    cal = doc.get("calibration", "missing")
    _require(
        cal is None
        or (isinstance(cal, dict) and any(isinstance(cal.get(k), int | float) for k in CALIBRATION_MEDIANS)),
        where,
        "calibration must be null or an object with median (the fit's median |error|)",
    )
    versions = doc.get("versions")
    _require(
        isinstance(versions, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in versions.items()),
        where,
        "versions must map names to strings",
    )
    device = doc.get("device", "missing")
    _require(
        device is None or (isinstance(device, dict) and isinstance(device.get("profile"), dict)),
        where,
        "device must be null or an object with the fitted SoC profile (profile) and the fit (fit)",
    )
    if device is not None:
        try:
            profile = profile_from_json(device["profile"])
        except BadRequest as e:
            raise TableError(f"{where}: device.profile: {e}") from None
        _require(profile.name == doc["soc"], where, f"device.profile is {profile.name!r}'s, not {doc['soc']!r}'s")
        _require(
            profile.profile_hash == doc["soc_profile_hash"],
            where,
            f"soc_profile_hash {doc['soc_profile_hash']!r} is not the device profile's {profile.profile_hash!r}",
        )
    entries = tuple(_entry_from_json(e, f"{where}: entries[{i}]") for i, e in enumerate(doc["entries"]))
    keys = [(e.variant, e.size) for e in entries]
    _require(len(keys) == len(set(keys)), where, "duplicate entries for the same variant and size")
    return TuningTable(
        doc["soc"],
        doc["soc_profile_hash"],
        doc["kernel_hash"],
        doc["backend"],
        doc["created"],
        doc["trials_per_study"],
        entries,
        cal,
        versions,
        device,
    )


MAX_TABLE_BYTES = 64 * 2**20  # the shipped tables are ~1 MiB


def load_table(path: str | Path) -> TuningTable:
    """One table file, read defensively: a regular file (a FIFO or a device named like a table would
    hang or never end), at most MAX_TABLE_BYTES, UTF-8 JSON; anything else is a TableError naming it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    except OSError as e:
        raise TableError(f"{path}: cannot read ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # before fdopen, which refuses a directory as "[Errno 21] ...: <fd>"
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise TableError(f"{path}: {kind}, not a table file")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > MAX_TABLE_BYTES:
            raise TableError(f"{path}: {st.st_size} B, over the {MAX_TABLE_BYTES} B a table may have")
        try:
            raw = f.read(MAX_TABLE_BYTES + 1)
        except OSError as e:
            raise TableError(f"{path}: cannot read ({e.strerror})") from None
    if len(raw) > MAX_TABLE_BYTES:
        raise TableError(f"{path}: grew past the {MAX_TABLE_BYTES} B a table may have while being read")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TableError(f"{path}: not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise TableError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    return table_from_json(doc, str(path))


def write_table(table: TuningTable, path: str | Path) -> None:
    """Write atomically: readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(table.to_json(), f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a shipped table is world-readable
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise

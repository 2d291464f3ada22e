"""The answer to a tiling request from a set of tuned tables: what ``POST /tiling`` answers, and what
``python -m model_tools tiling`` and the PyTorch operator (``kernel.torch_op``) use too.

A tuned entry where the table was tuned at the exact size; between entries the size bucket's
BUFFER_NUM (every BUFFER_NUM where the table was tuned on a device) with block size, core count and tile
re-fitted by the cost model at the exact size (what the CANN build's TilingFunc does too); the model's
best over the whole space where no table applies. Knobs the request fixes override the answer's. Every
tiling is validated before it is returned; a table's SoC profile (the device it was tuned on, where it
carries one) is the one its answers use.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiling_model.errors import BadRequest, InvalidTiling, TableError
from tiling_model.pick import model_best, refit_tiling
from tiling_model.soc import SocProfile, known_socs, load_soc
from tiling_model.tables import TuningTable, load_table
from tiling_model.tiling import TilingData, TilingError, TilingParams, compute_tiling, default_tile_bytes, element_count
from tiling_model.validate import Violation, validate
from tiling_model.variant import Variant

TABLES_ENV = "BCETUNE_TABLES"


def shipped_tables_dir() -> Path:
    """The tables that ship with bcetune (``service/tables``, package data beside this package), or the
    directory in $BCETUNE_TABLES (your own, e.g. tuned on your NPU)."""
    override = os.environ.get(TABLES_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "service" / "tables"


def load_tables(directory: Path) -> dict[str, TuningTable]:
    """Every ``<SoC>.json`` table in ``directory``, by SoC; TableError naming a bad file or directory."""
    if not directory.is_dir():
        origin = f"${TABLES_ENV}" if os.environ.get(TABLES_ENV) else "bcetune's own tables"
        raise TableError(f"{directory}: tables directory does not exist (the default here: {origin}, "
                         f"{shipped_tables_dir()})")  # fmt: skip
    out = {}
    for path in sorted(directory.glob("*.json")):
        if path.stem not in known_socs():
            raise TableError(f"{path}: file name is not a known SoC ({', '.join(known_socs())})")
        table = load_table(path)
        if table.soc != path.stem:
            raise TableError(f"{path}: holds SoC {table.soc!r}, but the file is named for {path.stem!r}")
        out[table.soc] = table
    return out


@dataclass(frozen=True)
class Request:
    soc: str
    shape: tuple[int, ...]
    variant: Variant
    given: tuple[tuple[str, int], ...] = ()  # the knobs the request fixes
    weight_period: int = 0  # a last-dim weight's P or a rows weight's R (0: not such a weight)

    @property
    def classes(self) -> int:
        """C of a last-dim pos_weight (the last dim), 1 otherwise."""
        return self.shape[-1] if self.variant.pos_weight == "last_dim" and self.shape else 1


@dataclass(frozen=True)
class Resolution:
    tiling: TilingData
    source: str  # "exact": tuned at this size; "bucket": re-fitted in a tuned size's bucket; "model"
    provenance: dict[str, Any]
    profile: SocProfile  # what the answer's predictions use


#: Called with (request, entry size, violations) where a table entry fails validation at a size.
OnInvalidEntry = Callable[[Request, int, list[Violation]], None]


class Resolver:
    """Answers requests from ``tables`` (by SoC); ``kernel_hash`` is what a model answer's provenance names."""

    def __init__(
        self,
        tables: dict[str, TuningTable],
        kernel_hash: str | None = None,
        on_invalid_entry: OnInvalidEntry | None = None,
    ) -> None:
        self.tables = tables
        self.kernel_hash = kernel_hash
        self.on_invalid_entry = on_invalid_entry

    def profile(self, soc: str) -> SocProfile:
        """The profile a SoC's answers use: its table's (the device it was tuned on), else the shipped one."""
        table = self.tables.get(soc)
        return table.profile() if table is not None else load_soc(soc)

    def _tiling(self, r: Request, params: TilingParams) -> TilingData:
        return compute_tiling(list(r.shape), r.variant, params, self.profile(r.soc), "exact", r.weight_period or None)

    def tuned(self, r: Request) -> Resolution:
        """The answer before any knob the request fixes."""
        n = element_count(r.shape)
        soc = self.profile(r.soc)
        table = self.tables.get(r.soc)
        entry = table.lookup(r.variant, n) if table else None
        seeded = entry is None and r.variant.tuned_base != r.variant  # an untuned weight form: the full weight's bucket
        if table is not None and seeded:
            entry = table.lookup(r.variant.tuned_base, n)
        if table is not None and entry is not None:
            prov = {
                "schema_version": table.schema_version,
                "soc_profile_hash": table.soc_profile_hash,
                "kernel_hash": table.kernel_hash,
                "backend": table.backend,
                "created": table.created,
                "device_fitted": table.device is not None,
            }
            params = entry.tiling_params()
            if entry.size != n or seeded:  # re-fit block, cores and tile (a device's fit: BUFFER_NUM too)
                refitted = refit_tiling(list(r.shape), r.variant, soc, params, r.classes, r.weight_period)
                if refitted is not None:  # validated
                    return Resolution(refitted, "bucket", prov, soc)
            t = self._tiling(r, params)
            bad = validate(t, soc)
            if not bad:
                return Resolution(t, "exact" if entry.size == n and not seeded else "bucket", prov, soc)
            if self.on_invalid_entry is not None:
                self.on_invalid_entry(r, entry.size, bad)
        prov = {
            "schema_version": None,
            "soc_profile_hash": soc.profile_hash,
            "kernel_hash": self.kernel_hash,
            "backend": "model",
            "created": None,
            "device_fitted": False,
        }
        if n == 0:
            return Resolution(self._tiling(r, TilingParams()), "model", prov, soc)
        best = model_best(n, r.variant, soc, r.classes, r.weight_period)
        return Resolution(self._tiling(r, TilingParams(**best.params.as_dict())), "model", prov, soc)

    def resolve(self, r: Request) -> Resolution:
        """The answer: ``tuned``, with the knobs the request fixes over it (InvalidTiling, naming the
        rules, where they give a tiling that breaks); BadRequest where the launch cannot fit the
        device's memory (``fits_memory``)."""
        answer = self.resolve_unchecked(r)
        fits_memory(answer.tiling, answer.profile)
        return answer

    def resolve_unchecked(self, r: Request) -> Resolution:
        """``resolve`` without the memory check: what the CANN build's TilingFunc answers too (a
        launch no device could hold fails there at allocation, before any tiling is used)."""
        tuned = self.tuned(r)
        if not r.given:
            return tuned
        soc = tuned.profile
        merged = tuned.tiling.params.as_dict() | dict(r.given)
        try:
            t = self._tiling(r, TilingParams(**merged))
            bad = validate(t, soc)
            if bad and "tile_bytes" not in dict(r.given):
                # the tuned tile may not fit the buffers asked for: take the largest whole-block tile that does
                merged["tile_bytes"] = default_tile_bytes(t.kernel, soc, merged["block_bytes"], merged["buffer_num"])
                t = self._tiling(r, TilingParams(**merged))
                bad = validate(t, soc)
        except TilingError as e:
            raise InvalidTiling(str(e), [], field=e.field) from None
        if bad:
            raise InvalidTiling(
                "the requested knobs give a tiling that breaks: " + "; ".join(v.message for v in bad),
                [v.as_dict() for v in bad],
            )
        return Resolution(t, tuned.source, tuned.provenance, soc)


def fits_memory(t: TilingData, soc: SocProfile) -> None:
    """BadRequest naming the shape where the launch's tensors and workspace (``device_bytes``) exceed
    the SoC's device memory: no device could run that answer, so none is given."""
    need = t.device_bytes
    if need > soc.memory_bytes:
        gib = 1 << 30
        raise BadRequest(
            f"shape {list(t.shape)} ({t.variant.label()}) needs {need / gib:.1f} GiB of device memory "
            f"({t.workspace_bytes / gib:.1f} GiB of it workspace); {soc.name} has {soc.memory_bytes / gib:g} GiB",
            field="shape",
        )

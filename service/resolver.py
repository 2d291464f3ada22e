"""Turn a request into a tiling: a table entry when one applies, else the model's pick;
fixed knobs from the request override either.

Every tiling is validated before it is returned. Answers are cached per distinct request
(the response document itself), so a repeated request costs a dictionary lookup.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any

from kernel.sources import kernel_source_hash
from service.logs import LOGGER, event
from tiling_model import (
    BadRequest,
    BcetuneError,
    InvalidTiling,
    TilingData,
    TilingParams,
    Variant,
    compute_tiling,
    load_soc,
    predict_detail,
    validate,
)
from tiling_model.search import model_best, refit_tiling
from tiling_model.tables import TuningTable
from tiling_model.tiling import KNOB_NAMES, TilingError, default_tile_bytes, element_count

log = logging.getLogger(LOGGER)
CACHE_SIZE = 65536


@dataclass(frozen=True)
class Query:
    soc: str
    shape: tuple[int, ...]
    variant: Variant
    given: tuple[tuple[str, int], ...]  # the knobs the request fixes
    weight_period: int = 0  # a last-dim weight's P or a rows weight's R (0: not such a weight)

    @property
    def classes(self) -> int:
        """C of a last-dim pos_weight (the last dim), 1 otherwise."""
        return self.shape[-1] if self.variant.pos_weight == "last_dim" and self.shape else 1


def _response(t: TilingData, source: str, prov: dict[str, Any], given: tuple[tuple[str, int], ...]) -> dict:
    d = predict_detail(t)
    fixed = [k for k, _ in given]
    return {
        "soc": t.soc,
        "n": t.n,
        "params": t.params.as_dict(),
        "given": fixed,
        "tuned": [k for k in KNOB_NAMES if k not in fixed],
        "tiling": t.field_dict(),
        "tiling_b64": base64.b64encode(t.to_bytes()).decode(),
        "block_dim": t.block_dim,
        "tiling_key": t.tiling_key,
        "launch": t.block_dim > 0,
        "workspace_bytes": t.workspace_bytes,
        "weight": t.variant.weight,
        "weight_period": t.fields.weightPeriod,
        "predicted_us": round(d.predicted_us, 4),
        "roofline_us": round(d.roofline_us, 4),
        "source": source,
        "provenance": prov,
    }


class TilingResolver:
    def __init__(self, tables: dict[str, TuningTable]) -> None:
        self.tables = tables
        self.kernel_hash = kernel_source_hash()
        self._answers: dict[Query, dict[str, Any] | BcetuneError] = {}

    def cached(self, q: Query) -> dict[str, Any] | None:
        """The answer if this request was seen before (no work at all), else None; a request refused
        before is refused again from the cache (raises the same error)."""
        doc = self._answers.get(q)
        if isinstance(doc, BcetuneError):
            raise doc.with_traceback(None)  # no traceback piling up on the cached instance
        return doc

    def resolve(self, q: Query) -> dict[str, Any]:
        """Answer ``q`` (cached, refusals too; the first time may score the whole search space: ~0.2 s)."""
        doc = self.cached(q)
        if doc is None:
            try:
                doc = self._resolve(q)
            except (BadRequest, InvalidTiling) as e:
                self._remember(q, e)
                raise
            self._remember(q, doc)
        return doc

    def _remember(self, q: Query, outcome: dict[str, Any] | BcetuneError) -> None:
        if len(self._answers) >= CACHE_SIZE:
            self._answers.pop(next(iter(self._answers)))  # oldest first
        self._answers[q] = outcome

    def _tiling(self, q: Query, params: TilingParams) -> TilingData:
        return compute_tiling(list(q.shape), q.variant, params, q.soc, "exact", q.weight_period or None)

    def _tuned(self, q: Query, n: int) -> tuple[TilingData, str, dict[str, Any]]:
        soc = load_soc(q.soc)
        table = self.tables.get(q.soc)
        entry = table.lookup(q.variant, n) if table else None
        seeded = entry is None and q.variant.tuned_base != q.variant  # an untuned weight form: the full weight's bucket
        if table is not None and seeded:
            entry = table.lookup(q.variant.tuned_base, n)
        if table is not None and entry is not None:
            prov = {
                "schema_version": table.schema_version,
                "soc_profile_hash": table.soc_profile_hash,
                "kernel_hash": table.kernel_hash,
                "backend": table.backend,
                "created": table.created,
            }
            params = entry.tiling_params()
            if entry.size != n or seeded:  # keep the bucket's BUFFER_NUM, re-fit block, cores and tile
                refitted = refit_tiling(list(q.shape), q.variant, soc, params, q.classes, q.weight_period)
                if refitted is not None:  # validated
                    return refitted, "bucket", prov
            t = self._tiling(q, params)
            bad = validate(t, soc)
            if not bad:
                return t, ("exact" if entry.size == n and not seeded else "bucket"), prov
            event(
                log,
                logging.WARNING,
                "table entry fails validation at this size; serving the model's pick",
                soc=q.soc,
                entry_size=entry.size,
                n=n,
                violations=[v.message for v in bad],
            )
        prov = {
            "schema_version": None,
            "soc_profile_hash": soc.profile_hash,
            "kernel_hash": self.kernel_hash,
            "backend": "model",
            "created": None,
        }
        if n == 0:
            return self._tiling(q, TilingParams()), "model", prov
        best = model_best(n, q.variant, soc, q.classes, q.weight_period)
        return self._tiling(q, TilingParams(**best.params.as_dict())), "model", prov

    def _resolve(self, q: Query) -> dict[str, Any]:
        tuned, source, prov = self._tuned(q, element_count(q.shape))
        if not q.given:
            return _response(tuned, source, prov, q.given)
        merged = tuned.params.as_dict() | dict(q.given)
        soc = load_soc(q.soc)
        try:
            t = self._tiling(q, TilingParams(**merged))
            bad = validate(t, soc)
            if bad and "tile_bytes" not in dict(q.given):
                # the tuned tile may not fit the buffers asked for: take the largest whole-block tile that does
                merged["tile_bytes"] = default_tile_bytes(t.kernel, soc, merged["block_bytes"], merged["buffer_num"])
                t = self._tiling(q, TilingParams(**merged))
                bad = validate(t, soc)
        except TilingError as e:
            raise InvalidTiling(str(e), [], field=e.field) from None
        if bad:
            raise InvalidTiling(
                "the requested knobs give a tiling that breaks: " + "; ".join(v.message for v in bad),
                [v.as_dict() for v in bad],
            )
        return _response(t, source, prov, q.given)

"""Turn a request into a tiling: the table entry when one applies, else the model's pick.

Every tiling is validated before it is returned; a table entry that fails validation is
logged and never served.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from functools import lru_cache

from tiling_model import TilingData, compute_tiling, element_count, load_soc, predict, validate
from tiling_model.search import model_best
from tiling_model.tables import TuningTable

log = logging.getLogger("bcetune.service")


@dataclass(frozen=True)
class Resolved:
    tiling: TilingData
    predicted_us: float
    source: str  # "table" or "model"
    provenance: dict[str, object]

    def as_response(self) -> dict[str, object]:
        t = self.tiling
        return {
            "soc": t.soc,
            "n": t.n,
            "params": t.params.as_dict(),
            "tiling": t.field_dict(),
            "tiling_b64": base64.b64encode(t.to_bytes()).decode(),
            "block_dim": t.block_dim,
            "tiling_key": t.tiling_key,
            "predicted_us": round(self.predicted_us, 4),
            "source": self.source,
            "provenance": self.provenance,
        }


class TilingResolver:
    def __init__(self, tables: dict[str, TuningTable]) -> None:
        self.tables = tables
        self.resolve = lru_cache(maxsize=65536)(self._resolve)

    def _resolve(self, soc_name: str, n: int, dtype: str, reduction: str, weight: bool) -> Resolved:
        soc = load_soc(soc_name)
        table = self.tables.get(soc_name)
        entry = table.lookup(dtype, reduction, weight, n) if table else None
        if table is not None and entry is not None:
            t = compute_tiling([n], dtype, reduction, entry.tiling_params(), soc, "exact", weight)
            bad = validate(t, soc)
            if not bad:
                prov = {
                    "schema_version": table.schema_version,
                    "soc_profile_hash": table.soc_profile_hash,
                    "backend": table.backend,
                    "created": table.created,
                }
                return Resolved(t, predict(t, soc), "table", prov)
            log.warning(
                "table entry %s/%s/%s/n=%d on %s fails validation (%s); serving the model's pick",
                dtype,
                reduction,
                weight,
                entry.size,
                soc_name,
                "; ".join(v.message for v in bad),
            )
        t = model_best(n, dtype, reduction, weight, soc) if n else compute_tiling([0], dtype, reduction, None, soc)
        bad = validate(t, soc)
        if bad:  # the model grid only returns validated tilings; this guards the guarantee
            raise RuntimeError(f"model tiling failed validation: {bad}")
        prov = {"schema_version": None, "soc_profile_hash": soc.profile_hash, "backend": "model", "created": None}
        return Resolved(t, predict(t, soc), "model", prov)

    def resolve_shape(self, shape: list[int], dtype: str, reduction: str, soc: str, weight: bool) -> Resolved:
        return self.resolve(soc, element_count(shape), dtype, reduction, weight)

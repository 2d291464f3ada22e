"""Turn a request into a tiling: a table entry when one applies, else the model's pick;
fixed knobs from the request override either.

The answer itself is ``tiling_model.resolve`` (what the CLI and the PyTorch operator use too); every
tiling is validated before it is returned. Answers are cached per distinct request as the
response's JSON bytes and its source: a repeated request costs a dictionary lookup and no encoding,
and the cache holds no containers for the garbage collector to walk (a bytes and a str in a tuple).
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import orjson

from kernel.sources import kernel_source_hash
from service.logs import LOGGER, event
from tiling_model import BadRequest, BcetuneError, InvalidTiling, SocProfile, TilingData
from tiling_model.confidence import interval
from tiling_model.cost import predict_with_roofline
from tiling_model.resolve import Request, Resolver
from tiling_model.tables import TuningTable
from tiling_model.tiling import KNOB_NAMES, element_count
from tiling_model.validate import Violation

log = logging.getLogger(LOGGER)
CACHE_SIZE = 65536


class Query(Request):
    """A request as the service caches it (tiling_model.resolve.Request, keyed flat)."""

    def key(self) -> tuple[object, ...]:
        """The query as a flat tuple of numbers and strings: the answer cache's key. The garbage collector
        stops tracking such a tuple, so tens of thousands of cached answers add nothing to its passes."""
        v = self.variant
        return (self.soc, self.shape, v.dtype, v.reduction, v.weight, v.pos_weight, v.wrt, self.given,
                self.weight_period)  # fmt: skip


def _response(
    t: TilingData, source: str, prov: dict[str, Any], given: tuple[tuple[str, int], ...], soc: SocProfile
) -> dict:
    predicted, roofline = predict_with_roofline(t, soc)
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
        "predicted_us": round(predicted, 4),
        "predicted_interval_us": interval(t, soc, predicted),
        "roofline_us": round(roofline, 4),
        "source": source,
        "provenance": prov,
    }


Answer = tuple[bytes, str]  # the response's JSON, its source ("exact", "bucket", "model")


class TilingResolver:
    def __init__(self, tables: dict[str, TuningTable]) -> None:
        self.tables = tables
        self.resolver = Resolver(tables, kernel_source_hash(), _log_invalid_entry)
        self._answers: dict[tuple[object, ...], Answer | BcetuneError] = {}

    def cached(self, q: Query) -> Answer | None:
        """The answer if this request was seen before (no work at all), else None; a request refused
        before is refused again from the cache (raises the same error)."""
        doc = self._answers.get(q.key())
        if isinstance(doc, BcetuneError):
            raise doc.with_traceback(None)  # no traceback piling up on the cached instance
        return doc

    def answer(self, q: Query) -> Answer:
        """Answer ``q`` as JSON bytes and source (cached, refusals too; a first time may score the whole
        search space where no table applies)."""
        got = self.cached(q)
        if got is None:
            try:
                r = self.resolver.resolve(q)
            except (BadRequest, InvalidTiling) as e:
                self._remember(q, e)
                raise
            doc = _response(r.tiling, r.source, r.provenance, q.given, r.profile)
            got = (orjson.dumps(doc), r.source)
            self._remember(q, got)
        return got

    def resolve(self, q: Query) -> dict[str, Any]:
        """``answer`` as the response document."""
        doc: dict[str, Any] = orjson.loads(self.answer(q)[0])
        return doc

    def profile(self, soc: str) -> SocProfile:
        return self.resolver.profile(soc)

    def _remember(self, q: Query, outcome: Answer | BcetuneError) -> None:
        if len(self._answers) >= CACHE_SIZE:
            self._answers.pop(next(iter(self._answers)))  # oldest first
        self._answers[q.key()] = outcome


def _log_invalid_entry(r: Request, size: int, bad: list[Violation]) -> None:
    event(
        log,
        logging.WARNING,
        "table entry fails validation at this size; serving the model's pick",
        soc=r.soc,
        entry_size=size,
        n=element_count(r.shape),
        violations=[v.message for v in bad],
    )

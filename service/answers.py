"""Turn a request into a tiling: a table entry when one applies, else the model's pick;
fixed knobs from the request override either.

The answer itself is ``tiling_model.resolve`` (what the CLI and the PyTorch operator use too); every
tiling is validated before it is returned. Answers are cached per distinct request as the
response's JSON bytes and its source: a repeated request costs a dictionary lookup and no encoding,
and the cache holds no containers for the garbage collector to walk (a bytes and a str in a tuple).
Refusals are cached as what their answer needs (``Refusal``: the error's kind, message and field, its
violations as JSON bytes), never as the exception: its traceback kept the request it refused alive. The
cache is bounded in bytes (``cache_bytes``; each entry counted as its key, its bytes and their overhead),
oldest first out.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any

import orjson

from kernel.sources import kernel_source_hash
from service.logs import LOGGER, event
from tiling_model import BadRequest, InvalidTiling, SocProfile, TilingData
from tiling_model.confidence import interval
from tiling_model.cost import predict_with_roofline
from tiling_model.resolve import Request, Resolver
from tiling_model.tables import TuningTable
from tiling_model.tiling import KNOB_NAMES, element_count
from tiling_model.validate import Violation

log = logging.getLogger(LOGGER)
CACHE_BYTES = 64 << 20  # Settings.cache_mb
ENTRY_OVERHEAD = 360  # bytes a cache entry costs beyond its contents: dict slot, tuples, object headers


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused request as the cache keeps it: what its 422 says, nothing of the request."""

    error: type[BadRequest] | type[InvalidTiling]
    message: str
    field: str | None
    violations: bytes  # JSON

    @classmethod
    def of(cls, e: BadRequest | InvalidTiling) -> Refusal:
        violations = orjson.dumps(e.violations) if isinstance(e, InvalidTiling) else b""
        return cls(type(e), str(e), getattr(e, "field", None), violations)

    def error_again(self) -> BadRequest | InvalidTiling:
        """The refusal as a fresh exception (no traceback, no frames), as the routes answer it."""
        if issubclass(self.error, InvalidTiling):
            return self.error(self.message, orjson.loads(self.violations), self.field)
        return self.error(self.message, self.field)

    def size(self) -> int:
        return len(self.message) + len(self.violations)


def _key_bytes(key: tuple[object, ...]) -> int:
    """What a key holds beyond ENTRY_OVERHEAD: its strings and numbers, its shape's and knobs' tuples."""
    n = 0
    for part in key:
        if isinstance(part, str):
            n += len(part) + 49
        elif isinstance(part, tuple):
            n += 56 + 8 * len(part) + sum(_key_bytes(p) if isinstance(p, tuple) else 32 for p in part)
        else:
            n += 32
    return n


class Query(Request):
    """A request as the service caches it (tiling_model.resolve.Request, keyed flat)."""

    def key(self) -> tuple[object, ...]:
        """The query as a flat tuple of numbers and strings: the answer cache's key. The garbage collector
        stops tracking such a tuple, so tens of thousands of cached answers add nothing to its passes."""
        v = self.variant
        return (self.soc, self.shape, v.dtype, v.reduction, v.weight, v.pos_weight, v.wrt, v.mode, self.given,
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
        "mode": t.variant.mode,
        "predicted_us": round(predicted, 4),
        **interval(t, soc, predicted).fields(),
        "roofline_us": round(roofline, 4),
        "source": source,
        "provenance": prov,
    }


Answer = tuple[bytes, str]  # the response's JSON, its source ("exact", "bucket", "model")


class CachedAnswers:
    """The service's answers by request: ``tiling_model.resolve``'s tiling as response bytes, cached in bytes."""

    def __init__(self, tables: dict[str, TuningTable], cache_bytes: int = CACHE_BYTES) -> None:
        self.tables = tables
        self.resolver = Resolver(tables, kernel_source_hash(), _log_invalid_entry)
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0
        self._answers: dict[tuple[object, ...], tuple[Answer | Refusal, int]] = {}

    def cached(self, q: Query) -> Answer | None:
        """The answer if this request was seen before (no work at all), else None; a request refused
        before is refused again from the cache (raises the same error, made anew)."""
        got = self._answers.get(q.key())
        if got is None:
            return None
        doc = got[0]
        if isinstance(doc, Refusal):
            raise doc.error_again()
        return doc

    def answer(self, q: Query) -> Answer:
        """Answer ``q`` as JSON bytes and source (cached, refusals too; a first time may score the whole
        search space where no table applies)."""
        got = self.cached(q)
        if got is None:
            try:
                r = self.resolver.resolve(q)
            except (BadRequest, InvalidTiling) as e:
                self._remember(q, Refusal.of(e))
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

    def _remember(self, q: Query, outcome: Answer | Refusal) -> None:
        key = q.key()
        size = ENTRY_OVERHEAD + _key_bytes(key) + (outcome.size() if isinstance(outcome, Refusal) else len(outcome[0]))
        old = self._answers.pop(key, None)
        if old is not None:
            self.cached_bytes -= old[1]
        while self._answers and self.cached_bytes + size > self.cache_bytes:
            self.cached_bytes -= self._answers.pop(next(iter(self._answers)))[1]  # oldest first
        self._answers[key] = (outcome, size)
        self.cached_bytes += size


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

"""The tilings the operator runs: resolved as the service resolves them (``tiling_model.resolve``: the
shipped tables or $BCETUNE_TABLES, the re-fit between their sizes, the model where none applies), once per
(SoC, tables, shapes, dtypes, reduction, wrt) in a bounded LRU cache."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel import cpu as twin
from kernel.sources import kernel_source_hash
from kernel.torch_op.calls import Shapes, call_variant
from tiling_model import BadRequest, TilingData, known_socs, predict
from tiling_model.confidence import Interval, interval
from tiling_model.resolve import TABLES_ENV, Request, Resolver, load_tables, shipped_tables_dir

#: The SoC whose tilings the CPU twin runs (the twin emulates its UB and core count).
SOC_ENV = "BCETUNE_SOC"
DEFAULT_CPU_SOC = "Ascend910B2"
#: Tilings kept per process (host side; the NPU extension keeps as many device buffers).
CACHE_SIZE = 1024
_DEFAULT_TABLES = str(shipped_tables_dir()) if not os.environ.get(TABLES_ENV) else None


@dataclass(frozen=True)
class OpTiling:
    """The tiling the operator runs for one kind of call, and where it came from."""

    soc: str
    source: str  # "exact" (tuned at this size), "bucket" (re-fitted in a tuned size's bucket) or "model"
    tiling: TilingData
    provenance: dict[str, Any]
    prepared: twin.PreparedTiling = field(repr=False, compare=False)
    predicted_us: float = 0.0  # the cost model's time for it, under the profile the answer used
    interval: Interval = field(default=Interval(0.0, 0.0, "nothing to launch"), compare=False)

    def __str__(self) -> str:
        t = self.tiling
        p = t.params
        return (
            f"{self.soc} {t.variant.label()} n={t.n}: {self.source} tiling, {t.block_dim} cores, "
            f"block {p.block_bytes} B, tile {p.tile_bytes} B, BUFFER_NUM {p.buffer_num} "
            + (
                f"(from the {self.soc} table, swept on the {self.provenance.get('backend')} backend)"
                if self.provenance.get("schema_version") is not None
                else "(no table applies: the model's best)"
            )
            + f"; predicted {self.predicted_us:.2f} us, expected {self.interval.lo_us:.2f} to {self.interval.hi_us:.2f}"
            f" ({self.interval.basis})"
        )


def tables_dir() -> str:
    """The tables the operator reads: $BCETUNE_TABLES, else the shipped ones."""
    return os.environ.get(TABLES_ENV) or _DEFAULT_TABLES or str(shipped_tables_dir())


def cpu_soc() -> str:
    """The SoC whose tilings the CPU twin runs: $BCETUNE_SOC, else Ascend910B2."""
    return _known_soc(os.environ.get(SOC_ENV) or DEFAULT_CPU_SOC)


@functools.lru_cache(maxsize=16)
def _known_soc(soc: str) -> str:
    if soc not in known_socs():
        raise BadRequest(f"${SOC_ENV}={soc!r} is not a known SoC ({', '.join(known_socs())})")
    return soc


@functools.lru_cache(maxsize=8)
def _resolver(tables: str) -> Resolver:
    return Resolver(load_tables(Path(tables)), kernel_source_hash())


@functools.lru_cache(maxsize=CACHE_SIZE)
def resolved(
    soc: str, tables: str, shapes: Shapes, dtypes: tuple[str, ...], reduction: str, wrt: str, mode: str = "grad"
) -> OpTiling:
    """The tiling for one kind of call (checked by ``call_variant``; ``mode`` fused: the loss-and-gradient
    kernel), resolved once and kept: the key is everything the tiling depends on."""
    variant, period = call_variant(shapes, dtypes, reduction, wrt, mode)
    r = _resolver(tables).resolve(Request(soc, shapes[1], variant, weight_period=period))
    us = predict(r.tiling, r.profile) if r.tiling.block_dim else 0.0
    prepared = twin.PreparedTiling.of(r.tiling)
    return OpTiling(soc, r.source, r.tiling, r.provenance, prepared, round(us, 4), interval(r.tiling, r.profile, us))


#: What else holds tilings and forgets them with the host cache (the NPU extension's device buffers, registered
#: by ``npu_device`` as it loads: this module does not import it).
_ON_RELOAD: list[Callable[[], None]] = []


def on_reload(forget: Callable[[], None]) -> None:
    """Have ``reload_tables`` call ``forget`` too."""
    _ON_RELOAD.append(forget)


def reload_tables() -> None:
    """Forget the loaded tables and every cached tiling (after editing a tables directory in place);
    the NPU extension's device buffers too."""
    resolved.cache_clear()
    _resolver.cache_clear()
    for forget in _ON_RELOAD:
        forget()


def cache_info() -> functools._CacheInfo:
    """Hits, misses and size of the host tiling cache."""
    return resolved.cache_info()

"""``GET /healthz`` (the process is up) and ``/readyz`` (it has tables worth serving)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from service.deps import ServiceDep, json_bytes
from service.schemas import ReadyResponse

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
async def readyz(service: ServiceDep) -> Any:
    """Ready when at least one table is loaded and every loaded table has entries that validate
    (a table whose entries all fail would silently send every request to the cost model); degraded (still
    ready: /tiling serves) while a dead explanation/picture worker's replacement starts."""
    tables = service.store.snapshot.tables
    empty = sorted(soc for soc, lt in tables.items() if not lt.table.entries)
    ready = bool(tables) and not empty
    degraded = service.scheduler.degraded
    status = "not_ready" if not ready else "degraded" if degraded else "ready"
    doc = {"ready": ready, "tables": len(tables), "socs": sorted(tables), "empty": empty, "status": status,
           "degraded": degraded}  # fmt: skip
    return json_bytes(doc, status_code=200 if ready else 503)

"""What routes depend on, injected by FastAPI from the app's state (set once in create_app)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request
from fastapi.responses import Response

from service.config import Settings
from service.metrics import Metrics
from service.scheduler import Scheduler
from service.store import TableStore


@dataclass(frozen=True)
class Service:
    """The state a tiling route needs, as one dependency (FastAPI resolves each dependency per request:
    one instead of three is ~0.1 ms less on every cold answer)."""

    store: TableStore
    metrics: Metrics
    settings: Settings
    scheduler: Scheduler


async def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


async def get_store(request: Request) -> TableStore:
    return (await get_service(request)).store


async def get_metrics(request: Request) -> Metrics:
    return (await get_service(request)).metrics


StoreDep = Annotated[TableStore, Depends(get_store)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
ServiceDep = Annotated[Service, Depends(get_service)]


def json_bytes(content: Any, status_code: int = 200) -> Response:
    """A JSON response serialised by orjson (cached answers are plain dicts: no model round trip on
    the hot path; tests check every 200 against its declared response model)."""
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json")

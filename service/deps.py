"""What routes depend on, injected by FastAPI from the app's state (set once in create_app)."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import Depends, Request
from fastapi.responses import Response

from service.config import Settings
from service.metrics import Metrics
from service.store import TableStore


async def get_store(request: Request) -> TableStore:
    store: TableStore = request.app.state.store
    return store


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


StoreDep = Annotated[TableStore, Depends(get_store)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def json_bytes(content: Any, status_code: int = 200) -> Response:
    """A JSON response serialised by orjson (cached answers are plain dicts: no model round trip on
    the hot path; tests check every 200 against its declared response model)."""
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json")

"""``GET /tables`` and ``/socs``: what the service serves from, and the SoC profiles it knows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter

from service.deps import StoreDep, json_bytes
from service.schemas import SocInfo, TableInfo, TablesResponse
from tiling_model import known_socs

router = APIRouter(tags=["tables"])


@router.get("/socs", response_model=list[SocInfo])
async def socs(store: StoreDep) -> Any:
    """The SoC profiles answers use: a loaded device-tuned table's fitted profile, else the shipped one."""
    answers = store.snapshot.answers
    return json_bytes([SocInfo.of(answers.profile(name)).model_dump() for name in known_socs()])


@router.get("/tables", response_model=TablesResponse)
async def tables(store: StoreDep) -> Any:
    """Per SoC: provenance, entry counts and staleness against the running code; reload history."""
    infos = [TableInfo.of(soc, lt).model_dump() for soc, lt in sorted(store.snapshot.tables.items())]
    error = store.last_error
    doc = {
        "tables": infos,
        "reloads": store.reloads,
        "failed_reloads": store.failed_reloads,
        "last_reload_error": error.error if error else None,
        "last_reload_error_file": error.file if error else None,
        "last_reload_error_at": datetime.fromtimestamp(error.at, UTC).isoformat() if error else None,
    }
    return json_bytes(doc)

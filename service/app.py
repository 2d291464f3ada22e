"""FastAPI app: thin routes over the resolver; pydantic models are the contract."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from service.resolver import TilingResolver
from service.schemas import TilingRequest, TilingResponse
from service.tables_store import load_tables


def create_app(tables_dir: Path | None = None) -> FastAPI:
    tables = load_tables(tables_dir)
    resolver = TilingResolver(tables)
    app = FastAPI(
        title="bcetune",
        version="0.1.0",
        description="Tuned tilings for the Ascend C BinaryCrossEntropyGrad kernel on Ascend A2 NPUs.",
    )
    app.state.tables = tables
    app.state.resolver = resolver

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/tiling", response_model=TilingResponse)
    def tiling(req: TilingRequest) -> dict[str, object]:
        """Tuned tiling for one call: from the shipped table when an entry applies, else the cost model."""
        return resolver.resolve_shape(req.shape, req.dtype, req.reduction, req.soc, req.weight).as_response()

    return app

"""The baseline of benchmarks/cached_vs_bare.py: a bare FastAPI app (no middleware, uvicorn's defaults)
whose one POST parses a body of /tiling's fields into a pydantic model and answers a small JSON."""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel


class Trivial(BaseModel):
    shape: list[int]
    dtype: str
    reduction: str = "none"


app = FastAPI()


@app.post("/trivial")
async def trivial(req: Trivial) -> dict[str, object]:
    return {"ok": True, "dims": len(req.shape)}

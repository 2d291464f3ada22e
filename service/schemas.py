"""The HTTP contract: pydantic models for requests and responses.

Every rule a request can break is checked here, so routes never see bad input and each
422 names the field and the rule.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tiling_model import known_socs
from tiling_model.dtypes import INT_DTYPES

MAX_DIMS = 8
MAX_DIM = 2**31 - 1
INT64_MAX = 2**63 - 1
DEFAULT_SOC = "Ascend910B2"

DtypeName = Literal["float32", "float16", "bfloat16", "int32", "int16"]
ReductionName = Literal["none", "sum", "mean"]


class TilingRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"}]},
    )

    shape: list[int] = Field(
        max_length=MAX_DIMS, description=f"tensor dims, each 0..{MAX_DIM}; at most {MAX_DIMS} dims"
    )
    dtype: DtypeName
    reduction: ReductionName = "none"
    soc: str = Field(DEFAULT_SOC, description="target SoC, one of GET /socs")
    weight: bool = Field(True, description="the optional weight input is present")

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: list[int]) -> list[int]:
        n = 1
        for i, d in enumerate(shape):
            if d < 0:
                raise ValueError(f"dimension {i} is negative ({d})")
            if d > MAX_DIM:
                raise ValueError(f"dimension {i} is {d}, above {MAX_DIM}")
            n *= d
        if n > INT64_MAX:
            raise ValueError(f"element count {n} exceeds int64")
        return shape

    @field_validator("soc")
    @classmethod
    def _soc(cls, soc: str) -> str:
        if soc not in known_socs():
            raise ValueError(f"unknown SoC {soc!r}; known: {', '.join(known_socs())}")
        return soc

    @field_validator("reduction")
    @classmethod
    def _int_none_only(cls, reduction: str, info: ValidationInfo) -> str:
        dtype = info.data.get("dtype")
        if dtype in INT_DTYPES and reduction != "none":
            raise ValueError(f"dtype {dtype} supports reduction 'none' only, not {reduction!r}")
        return reduction


class Params(BaseModel):
    block_bytes: int
    buffer_num: int
    tile_bytes: int
    core_num: int


class Provenance(BaseModel):
    schema_version: int | None = None
    soc_profile_hash: str
    backend: str
    created: str | None = None


class TilingResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "soc": "Ascend910B2",
                    "n": 1048576,
                    "params": {"block_bytes": 512, "buffer_num": 2, "tile_bytes": 11264, "core_num": 24},
                    "tiling": {"totalLength": 1048576, "...": "..."},
                    "tiling_b64": "AAAQAAAAAAA...",
                    "block_dim": 24,
                    "tiling_key": 2111,
                    "predicted_us": 8.07,
                    "source": "table",
                    "provenance": {"schema_version": 1, "soc_profile_hash": "5ba004dfa686e29c", "backend": "model"},
                }
            ]
        }
    )

    soc: str
    n: int = Field(description="element count")
    params: Params
    tiling: dict[str, int] = Field(description="tiling struct fields, in struct order")
    tiling_b64: str = Field(description="base64 of the exact bytes the kernel reads")
    block_dim: int
    tiling_key: int
    predicted_us: float
    source: Literal["table", "model"]
    provenance: Provenance

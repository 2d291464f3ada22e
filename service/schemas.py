"""The HTTP contract: pydantic models for requests, responses and errors.

Every rule a request can break is checked here, so routes never see bad input and each
422 names the field (``loc``) and the rule (``msg``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema, field_validator

from tiling_model import Dtype, PosWeightForm, Reduction, SocProfile, Variant, Wrt, known_socs, load_soc
from tiling_model.dtypes import DTYPE_BYTES, INT_DTYPES, UnsupportedError
from tiling_model.variant import Broadcast, BroadcastForm, Mode, pos_weight_of, weight_spec

if TYPE_CHECKING:
    from service.store import LoadedTable

MAX_DIMS = 8
MAX_DIM = 2**31 - 1
INT64_MAX = 2**63 - 1
PARAM_MAX = 2**31 - 1
MAX_CORES = max(load_soc(s).aiv_cores for s in known_socs())
MAX_UB = max(load_soc(s).ub_bytes for s in known_socs())


class ParamsIn(BaseModel):
    """Any subset of the four knobs; the service completes the rest."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"buffer_num": 2, "tile_bytes": 8192}]}
    )

    block_bytes: int | None = Field(None, ge=32, le=PARAM_MAX, description="core-split granularity, multiple of 32")
    buffer_num: int | None = Field(None, ge=1, le=4, description="buffers per queue")
    tile_bytes: int | None = Field(None, ge=32, le=MAX_UB, description="bytes per tile per stream")
    core_num: int | None = Field(None, ge=1, le=MAX_CORES, description="vector cores to use")

    def given(self) -> tuple[tuple[str, int], ...]:
        return tuple((k, v) for k, v in self.model_dump().items() if v is not None)


class TilingRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"},
                {"shape": [64, 1000], "dtype": "float32", "pos_weight": "last_dim", "params": {"buffer_num": 1}},
                {"shape": [4096, 1000], "dtype": "float16", "weight": [1000]},
                {"shape": [4096, 1000], "dtype": "float16", "weight": [4096, 1]},
                {
                    "shape": [96, 1031],
                    "dtype": "float32",
                    "reduction": "mean",
                    "weight": [1031],
                    "pos_weight": [1031],
                    "mode": "fused",
                },
            ]
        },
    )

    dtype: Dtype  # before shape: the shape's byte bound depends on it
    shape: list[int] = Field(max_length=MAX_DIMS, description=f"dims, each 0..{MAX_DIM}; at most {MAX_DIMS}")
    reduction: Reduction = "none"
    soc: str | None = Field(None, description="target SoC (GET /socs); default: the service's default SoC")
    weight: bool | BroadcastForm | list[int] = Field(
        True,
        description="the optional weight: its shape (any shape PyTorch broadcasts to the input: [C], [N, 1], "
        "[1], ...), or its form: full / none (true / false), last_dim ([C], C the last dim), rows ([..., 1]: "
        "one value per last-dim row), scalar",
    )
    pos_weight: PosWeightForm | list[int] = Field(
        "none", description="absent, same shape, or [C] along the last dim: a form, or the shape"
    )
    wrt: Wrt = Field("logit", description="gradient w.r.t. the raw logit or the probability p")
    mode: Mode = Field(
        "grad",
        description="the kernel: grad, BinaryCrossEntropyGrad (the requirement's, reads grad, p, y); fused, "
        "BCEWithLogits' loss and gradient in one pass (bce_with_logits_fused: reads x, y, writes dx and the loss "
        "or per-core sums; float dtypes, wrt logit)",
    )
    params: ParamsIn | None = Field(None, description="knobs to fix; the others are tuned")

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: list[int], info: ValidationInfo) -> list[int]:
        n = 1
        for i, d in enumerate(shape):
            if d < 0:
                raise ValueError(f"dimension {i} is negative ({d})")
            if d > MAX_DIM:
                raise ValueError(f"dimension {i} is {d}, above {MAX_DIM}")
            n *= d
        if n > INT64_MAX:
            raise ValueError(f"element count {n} exceeds int64")
        dtype = info.data.get("dtype")
        if dtype in DTYPE_BYTES and n * DTYPE_BYTES[dtype] > INT64_MAX:
            raise ValueError(
                f"{n} {dtype} elements are {n * DTYPE_BYTES[dtype]} B, "
                f"beyond the kernel's int64 GM offsets ({INT64_MAX})"
            )
        return shape

    @field_validator("weight")
    @classmethod
    def _weight_broadcasts(cls, weight: bool | str | list[int], info: ValidationInfo) -> bool | str | list[int]:
        shape = info.data.get("shape")
        if shape is not None:
            _weight_of(weight, shape)  # raises, naming the shape
        return weight

    @field_validator("pos_weight")
    @classmethod
    def _last_dim_needs_a_dim(cls, pos_weight: str | list[int], info: ValidationInfo) -> str | list[int]:
        if pos_weight == "last_dim" and info.data.get("shape") == []:
            raise ValueError("pos_weight='last_dim' needs a shape with at least one dim (its C is the last dim)")
        shape = info.data.get("shape")
        if isinstance(pos_weight, list):
            _check_dims("pos_weight", pos_weight)  # also where the shape was refused
            if shape is not None:
                _pos_weight_of(pos_weight, shape)
        return pos_weight

    @field_validator("soc")
    @classmethod
    def _soc(cls, soc: str | None) -> str | None:
        if soc is not None and soc not in known_socs():
            raise ValueError(f"unknown SoC {soc!r}; known: {', '.join(known_socs())}")
        return soc

    @field_validator("reduction")
    @classmethod
    def _int_none_only(cls, reduction: str, info: ValidationInfo) -> str:
        dtype = info.data.get("dtype")
        if dtype in INT_DTYPES and reduction != "none":
            raise ValueError(f"dtype {dtype} supports reduction 'none' only, not {reduction!r}")
        return reduction

    @field_validator("wrt")
    @classmethod
    def _probability_rules(cls, wrt: str, info: ValidationInfo) -> str:
        if wrt == "probability" and info.data.get("pos_weight", "none") not in ("none", None):
            raise ValueError("pos_weight applies to wrt='logit' only")
        if wrt == "probability" and info.data.get("dtype") in INT_DTYPES:
            raise ValueError(f"wrt='probability' needs a float dtype, not {info.data['dtype']} (A2 has no integer Div)")
        return wrt

    @field_validator("mode")
    @classmethod
    def _fused_rules(cls, mode: str, info: ValidationInfo) -> str:
        if mode == "fused" and info.data.get("dtype") in INT_DTYPES:
            raise ValueError(f"mode='fused' needs a float dtype, not {info.data['dtype']}")
        if mode == "fused" and info.data.get("wrt", "logit") != "logit":
            raise ValueError("mode='fused' is BCEWithLogits: its gradient is with respect to the logit (wrt='logit')")
        return mode

    def weight_broadcast(self) -> Broadcast:
        return _weight_of(self.weight, self.shape)

    def variant(self) -> Variant:
        """The call's variant (every rule it checks is checked above, naming the field)."""
        pw = _pos_weight_of(self.pos_weight, self.shape) if isinstance(self.pos_weight, list) else self.pos_weight
        return Variant(self.dtype, self.reduction, self.weight_broadcast().form, pw, self.wrt, self.mode)  # type: ignore[arg-type]


def _weight_of(weight: bool | str | list[int], shape: list[int]) -> Broadcast:
    """The weight's form and period: from its shape (tiling_model.broadcast_of), or a form named with
    the period of a [C] (last_dim) or [..., 1] (rows) weight: the last dim."""
    if isinstance(weight, list):
        _check_dims("weight", weight)
    try:
        return weight_spec(weight, shape)
    except UnsupportedError as e:
        raise ValueError(str(e)) from None


def _check_dims(name: str, dims: list[int]) -> None:
    """An operand's shape has the input's limits: at most MAX_DIMS dims, each 0..MAX_DIM."""
    if len(dims) > MAX_DIMS:
        raise ValueError(f"{name} has {len(dims)} dims; at most {MAX_DIMS}")
    for i, d in enumerate(dims):
        if d < 0 or d > MAX_DIM:
            raise ValueError(f"{name} dimension {i} is {d}, outside 0..{MAX_DIM}")


def _pos_weight_of(pos_weight: list[int], shape: list[int]) -> str:
    """pos_weight's form from its shape (tiling_model.pos_weight_of: the input's shape or [C]; its dims
    are checked by the field's validator)."""
    try:
        return pos_weight_of(pos_weight, shape).form
    except UnsupportedError as e:
        raise ValueError(str(e)) from None


class BatchRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "requests": [
                        {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"},
                        {"shape": [7, 9], "dtype": "int16"},
                    ]
                }
            ]
        },
    )
    # Items are parsed one at a time as the batch is answered (service/routes/tiling.py), so a batch refused
    # at its first item never pays for the validation of the rest (it was 62% of such a request's server
    # time, py-spy); the schema says what each item is, as /tiling's body.
    requests: Annotated[
        list[Any],  # an item that is not an object is refused at its index, as any other bad item
        WithJsonSchema(
            {
                "type": "array",
                "items": {"$ref": "#/components/schemas/TilingRequest"},
                "minItems": 1,
                "description": "bounded by the service's max batch; each a /tiling request, answered in "
                "order: the first one refused (its 422 names it) ends the batch",
            }
        ),  # fmt: skip
    ] = Field(min_length=1)


class Params(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"block_bytes": 512, "buffer_num": 2, "tile_bytes": 15360, "core_num": 48}]}
    )

    block_bytes: int
    buffer_num: int
    tile_bytes: int
    core_num: int


class Provenance(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "schema_version": 4,
                    "soc_profile_hash": "88d92e28bc51f5a9",
                    "kernel_hash": "a98fadcd610907b4",
                    "backend": "model",
                    "created": "2026-11-30T11:26:35+00:00",
                    "device_fitted": False,
                }
            ]
        }
    )

    schema_version: int | None
    soc_profile_hash: str
    kernel_hash: str | None
    backend: str
    created: str | None
    device_fitted: bool = Field(
        description="the table was tuned on a device and its answers use the SoC profile fitted on that sweep's "
        "measurements (the re-fit at unseen sizes included)"
    )


class TilingResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "soc": "Ascend910B2",
                    "n": 1048576,
                    "params": {"block_bytes": 512, "buffer_num": 2, "tile_bytes": 15360, "core_num": 48},
                    "given": [],
                    "tuned": ["block_bytes", "buffer_num", "tile_bytes", "core_num"],
                    "tiling": {"totalLength": 1048576, "smallCoreDataNum": 21760},
                    "tiling_b64": "AAAQAAAAAAA=",
                    "block_dim": 48,
                    "tiling_key": 2111,
                    "launch": True,
                    "workspace_bytes": 0,
                    "weight": "full",
                    "weight_period": 0,
                    "mode": "grad",
                    "predicted_us": 9.17,
                    "predicted_interval_us": [8.1, 11.2],
                    "predicted_interval_basis": "Ascend910B2 profile's held-out < 4 MB band",
                    "roofline_us": 8.4,
                    "source": "exact",
                    "provenance": {
                        "schema_version": 4,
                        "soc_profile_hash": "88d92e28bc51f5a9",
                        "kernel_hash": "a98fadcd610907b4",
                        "backend": "model",
                        "created": "2026-11-30T11:20:00+00:00",
                        "device_fitted": False,
                    },
                }
            ]
        }
    )

    soc: str
    n: int = Field(description="element count")
    params: Params
    given: list[str] = Field(description="knobs the request fixed")
    tuned: list[str] = Field(description="knobs the service chose")
    tiling: dict[str, int] = Field(description="tiling struct fields, in struct order")
    tiling_b64: str = Field(description="base64 of the exact bytes the kernel reads")
    block_dim: int
    tiling_key: int
    launch: bool = Field(description="false for an empty tensor (a dim of 0): nothing to launch, no workspace")
    workspace_bytes: int = Field(description="GM workspace the kernel needs beyond the framework's (last-dim rows)")
    weight: BroadcastForm = Field(description="the weight's form the tiling is for")
    weight_period: int = Field(description="its period: P of last_dim, R of rows (elements per value); else 0")
    mode: Mode = Field(description="the kernel the tiling is for: grad (BinaryCrossEntropyGrad) or fused")
    predicted_us: float
    predicted_interval_us: tuple[float, float] = Field(
        description="where the kernel time is expected: the 10th to 90th percentile of held-out measured / "
        "predicted in the call's traffic class (a device-tuned table's: its own sweep held out by key, or by "
        "variant for a variant it did not measure); a class with too few held-out cases takes a wider band"
    )
    predicted_interval_basis: str = Field(description="which band the interval is, and why that one")
    roofline_us: float
    source: Literal["exact", "bucket", "model"] = Field(
        description="exact: tuned at this size; bucket: the size bucket's BUFFER_NUM (of a table tuned on a "
        "device: every BUFFER_NUM) with block, cores and tile re-fitted by the model at this size; model: the "
        "model's best over the whole space"
    )
    provenance: Provenance


class BatchResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"responses": ["<TilingResponse>", "..."]}]})

    responses: list[TilingResponse]


class ErrorItem(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"loc": ["body", "shape"], "msg": "dimension 1 is negative (-1)", "type": "value_error"}]
        }
    )

    loc: list[str | int]
    msg: str
    type: str
    violations: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": [
                        {
                            "loc": ["body", "params"],
                            "type": "invalid_tiling",
                            "msg": "the requested knobs give a tiling that breaks: ...",
                            "violations": [{"kind": "ub_overflow", "message": "...", "count": 6400}],
                        }
                    ]
                }
            ]
        }
    )

    detail: list[ErrorItem]


class SocInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "Ascend910B2",
                    "family": "Ascend910B",
                    "aiv_cores": 48,
                    "ub_bytes": 196608,
                    "ub_usable_bytes": 188160,
                    "clock_mhz": 1800,
                    "hbm_gbps": 1453.5,
                    "hbm_peak_gbps": 1600.0,
                    "l2_bytes": 201326592,
                    "l2_gbps": 2475.2,
                    "l2_half_bytes": 295492035,
                    "l2_falloff": 6.26,
                    "launch_us": 3.08,
                    "profile_hash": "88d92e28bc51f5a9",
                    "calibrated": True,
                    "device_fitted": False,
                }
            ]
        }
    )

    name: str
    family: str
    aiv_cores: int
    ub_bytes: int
    ub_usable_bytes: int
    clock_mhz: float
    hbm_gbps: float
    hbm_peak_gbps: float
    l2_bytes: int
    l2_gbps: float = Field(description="effective bandwidth of L2 hits")
    l2_half_bytes: float = Field(description="steady-state L2: the footprint at which half the traffic hits")
    l2_falloff: float = Field(
        description="steady-state L2: hit share 1 / (1 + (footprint / half) ** falloff), at most l2_bytes / footprint"
    )
    launch_us: float
    profile_hash: str
    calibrated: bool = Field(description="fitted to measurements on this SoC (else its values are estimates)")
    device_fitted: bool = Field(
        default=False,
        description="the profile a loaded device-tuned table carries, fitted on that device's measurements: what "
        "this SoC's answers use (else the shipped profile)",
    )

    @classmethod
    def of(cls, p: SocProfile) -> SocInfo:
        return cls(
            name=p.name,
            family=p.family,
            aiv_cores=p.aiv_cores,
            ub_bytes=p.ub_bytes,
            ub_usable_bytes=p.ub_usable_bytes,
            clock_mhz=p.clock_mhz,
            hbm_gbps=p.hbm_gbps,
            hbm_peak_gbps=p.hbm_peak_gbps,
            l2_bytes=p.l2_bytes,
            l2_gbps=p.l2_gbps,
            l2_half_bytes=p.l2_half_bytes,
            l2_falloff=p.l2_falloff,
            launch_us=p.launch_us,
            profile_hash=p.profile_hash,
            calibrated=p.calibration is not None and p.calibration.get("measured_on", p.name) == p.name,
            device_fitted=bool(p.calibration and p.calibration.get("device")),
        )


class TableInfo(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "soc": "Ascend910B2",
                    "path": "Ascend910B2.json",
                    "schema_version": 4,
                    "backend": "model",
                    "created": "2026-11-30T11:26:35",
                    "entries": 242,
                    "invalid_entries": 0,
                    "soc_profile_hash": "88d92e28bc51f5a9",
                    "kernel_hash": "a98fadcd610907b4",
                    "stale": False,
                    "stale_reasons": [],
                }
            ]
        }
    )

    soc: str
    path: str = Field(description="the table file, relative to the tables directory")
    schema_version: int
    backend: str
    created: str
    entries: int
    invalid_entries: int
    soc_profile_hash: str
    kernel_hash: str
    stale: bool
    stale_reasons: list[str]

    @classmethod
    def of(cls, soc: str, lt: LoadedTable) -> TableInfo:
        t = lt.table
        return cls(
            soc=soc,
            path=lt.path.name,  # the file name only: a public answer shows no server paths
            schema_version=t.schema_version,
            backend=t.backend,
            created=t.created,
            entries=len(t.entries),
            invalid_entries=len(lt.invalid),
            soc_profile_hash=t.soc_profile_hash,
            kernel_hash=t.kernel_hash,
            stale=bool(lt.stale),
            stale_reasons=list(lt.stale),
        )


class TablesResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"tables": ["<TableInfo>"], "reloads": 3, "failed_reloads": 0, "last_reload_error": None}]
        }
    )

    tables: list[TableInfo]
    reloads: int
    failed_reloads: int = Field(description="reloads refused (a bad new table): the old tables kept serving")
    last_reload_error: str | None = Field(description="why the last reload was refused; null after a good one")
    last_reload_error_file: str | None = Field(None, description="the table file it names, where it names one")
    last_reload_error_at: str | None = Field(None, description="when it was refused (UTC, ISO 8601)")


class ReadyResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"ready": True, "tables": 5, "socs": ["Ascend910B2"], "empty": []}]}
    )

    ready: bool
    tables: int
    socs: list[str]
    empty: list[str] = Field(description="SoCs whose table has no entry that validates (not ready while any)")
    status: Literal["ready", "degraded", "not_ready"] = Field(
        "ready", description="degraded: /tiling serves, explanations and pictures wait for a worker's replacement"
    )
    degraded: str | None = Field(None, description="why it is degraded, while it is")


#: The error answers every POST documents.
ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorResponse, "description": "request body over the size limit"},
    422: {"model": ErrorResponse, "description": "a field breaks a rule (loc names it, msg says which)"},
    503: {
        "model": ErrorResponse,
        "description": "a batch over its server-time budget (Retry-After; retry: its answers are cached)",
    },
}

"""Data types, reductions and which combinations the kernel supports."""

from __future__ import annotations

from typing import Literal

from tiling_model.errors import BadRequest

Dtype = Literal["float32", "float16", "bfloat16", "int32", "int16"]
Reduction = Literal["none", "sum", "mean"]

DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int16": 2}
DTYPE_ID: dict[str, int] = {"float32": 0, "float16": 1, "bfloat16": 2, "int32": 3, "int16": 4}
REDUCTION_ID: dict[str, int] = {"none": 0, "sum": 1, "mean": 2}
FLOAT_DTYPES: tuple[Dtype, ...] = ("float32", "float16", "bfloat16")
INT_DTYPES: tuple[Dtype, ...] = ("int32", "int16")
DTYPES: tuple[Dtype, ...] = FLOAT_DTYPES + INT_DTYPES
REDUCTIONS: tuple[Reduction, ...] = ("none", "sum", "mean")


class UnsupportedError(BadRequest):
    """A dtype, reduction or their combination that the kernel does not implement."""


def check_combination(dtype: str, reduction: str) -> None:
    """Raise UnsupportedError naming the problem; int dtypes allow reduction none only."""
    if dtype not in DTYPE_BYTES:
        raise UnsupportedError(f"unknown dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    if reduction not in REDUCTION_ID:
        raise UnsupportedError(f"unknown reduction {reduction!r}; supported: {', '.join(REDUCTIONS)}")
    if dtype in INT_DTYPES and reduction != "none":
        raise UnsupportedError(
            f"dtype {dtype} supports reduction 'none' only (the requirement's MODE_0), not {reduction!r}"
        )


def valid_combinations() -> list[tuple[Dtype, Reduction]]:
    """Every (dtype, reduction) pair the kernel supports."""
    return [(d, r) for d in DTYPES for r in REDUCTIONS if d in FLOAT_DTYPES or r == "none"]

"""Hypothesis strategies and small helpers shared by the model's tests (a helper module: test modules
import it, never each other)."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from tiling_model import Variant
from tiling_model.kernels import ElementwiseKernel, bce_grad_kernel
from tiling_model.variant import WEIGHT_FORMS

SOCS = ["Ascend910B2", "Ascend910B4", "Ascend310B1"]
variants = st.builds(
    Variant,
    st.sampled_from(["float16", "float32", "bfloat16"]),
    st.sampled_from(["none", "sum", "mean"]),
    st.sampled_from(WEIGHT_FORMS),
    st.sampled_from(["none", "full", "last_dim"]),
)
sizes = st.one_of(st.integers(1, 5000), st.integers(1, 10**6), st.integers(1, 10**10))


def period(v: Variant, n: int) -> int:
    """A last-dim or rows weight's period for n elements: a divisor of n, small or large by turns."""
    if v.weight not in ("last_dim", "rows"):
        return 0
    p = math.gcd(max(n, 1), 96)
    return p if n % 3 else max(n, 1) // p


def kernel(v: Variant, n: int) -> ElementwiseKernel:
    return bce_grad_kernel(v, "exact", 1, period(v, n))

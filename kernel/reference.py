"""Reference values and the tolerance a kernel output is judged by.

``reference`` is the closed form in float64 (the tests prove it equal to PyTorch autograd);
``terms`` is the magnitude the float32 arithmetic works at, so cancellation is judged fairly;
``mismatches`` applies the tolerance of each dtype:

- float32: within 4 ulp of the float64 value, plus 4 float32 epsilons of the terms where the
  formula cancels (pos_weight, probability);
- float16 / bfloat16: within 1 ulp of the correctly rounded value (plus the same cancellation
  allowance);
- int32 / int16: exact.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

PROB_EPS = 1e-12


def _f64(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.asarray(a).astype(np.float64)


def _broadcast(pos_weight: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
    if pos_weight is None:
        return None
    return np.broadcast_to(pos_weight, shape)


def _operands(
    grad: np.ndarray, p: np.ndarray, y: np.ndarray, pos_weight: np.ndarray | None, reduction: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """p, y, g (a scalar for sum/mean) and pos_weight broadcast to p's shape, all in float64."""
    p, y, g = (np.asarray(a).astype(np.float64) for a in (p, y, grad))
    if reduction != "none":
        g = g.reshape(())
    return p, y, g, _broadcast(_f64(pos_weight), p.shape)


def reference(
    grad: np.ndarray,
    p: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray | None = None,
    pos_weight: np.ndarray | None = None,
    reduction: str = "none",
    wrt: str = "logit",
    n: int | None = None,
) -> np.ndarray:
    """z in float64; ``n`` is the N that mean divides by (default: these elements, a slice may say more)."""
    p, y, g, pw = _operands(grad, p, y, pos_weight, reduction)
    if wrt == "probability":
        t = (p - y) / np.maximum(p * (1 - p), PROB_EPS)
    elif pw is not None:
        t = (pw * y + 1 - y) * p - pw * y
    else:
        t = p - y
    z = g * t
    if weight is not None:
        z = z * _f64(weight)
    if reduction == "mean":
        z = z / max(n or p.size, 1)
    return z


def integer_reference(
    grad: np.ndarray,
    p: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray | None = None,
    pos_weight: np.ndarray | None = None,
) -> np.ndarray:
    """The int kernel's formula in int64 (reduction none, wrt logit), wrapped to the input dtype."""
    out_dtype = np.asarray(p).dtype
    p, y, g = (np.asarray(a).astype(np.int64) for a in (p, y, grad))
    pw = _broadcast(None if pos_weight is None else np.asarray(pos_weight).astype(np.int64), p.shape)
    t = (pw * y + 1 - y) * p - pw * y if pw is not None else p - y
    z = g * t
    if weight is not None:
        z = z * np.asarray(weight).astype(np.int64)
    return z.astype(out_dtype)


def terms(
    grad: np.ndarray,
    p: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray | None = None,
    pos_weight: np.ndarray | None = None,
    reduction: str = "none",
    wrt: str = "logit",
    n: int | None = None,
) -> np.ndarray:
    """Magnitude of the partial results the kernel rounds (|w g| times the summed term sizes)."""
    p, y, g, pw = _operands(grad, p, y, pos_weight, reduction)
    if wrt == "probability":
        den = np.maximum(p * (1 - p), PROB_EPS)
        size = (np.abs(p) + np.abs(y)) / den
    elif pw is not None:
        size = np.abs(pw * y) * (1 + np.abs(p)) + np.abs((1 - y) * p)
    else:
        size = np.abs(p) + np.abs(y)
    s = np.abs(g) * size
    if weight is not None:
        s = s * np.abs(np.asarray(weight).astype(np.float64))
    if reduction == "mean":
        s = s / max(n or p.size, 1)
    return s


def _ordered(bits: np.ndarray, width: int) -> np.ndarray:
    """Map float bit patterns to integers that are monotone in the float value."""
    b = bits.astype(np.int64)
    sign = np.int64(1) << (width - 1)
    return np.where(b & sign, -(b & (sign - 1)), b)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Representable values between a and b (same float dtype)."""
    width = a.dtype.itemsize * 8
    view = {16: np.uint16, 32: np.uint32}[width]
    return np.abs(_ordered(a.view(view), width) - _ordered(b.view(view), width))


def mismatches(z: np.ndarray, ref: np.ndarray, size: np.ndarray, cancels: bool, input_eps: float = 0.0) -> np.ndarray:
    """Indices where the kernel output ``z`` falls outside the dtype's tolerance around ``ref``.
    ``input_eps``: the relative rounding of an input the reference did not see rounded (the sigmoid a
    loss saves in its dtype), added to the slack in proportion to the terms."""
    dt = z.dtype
    if np.issubdtype(dt, np.integer):
        return np.flatnonzero(z != ref.astype(dt))
    rounded = ref.astype(dt)
    dist = ulp_distance(z.reshape(-1), rounded.reshape(-1))
    allowed_ulps = 4 if dt == np.float32 else 1
    eps32 = float(np.finfo(np.float32).eps)
    slack = (4 * eps32 if cancels else 1e-14) * size.reshape(-1) + input_eps * size.reshape(-1)
    err = np.abs(z.reshape(-1).astype(np.float64) - ref.reshape(-1))
    ok = (dist <= allowed_ulps) | (err <= slack)
    if dt == ml_dtypes.bfloat16 or dt == np.float16:
        ok |= np.isnan(z.reshape(-1).astype(np.float32)) & np.isnan(ref.reshape(-1))
    return np.flatnonzero(~ok)


def wrong_elements(
    z: np.ndarray,
    grad: np.ndarray,
    p: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray | None = None,
    pos_weight: np.ndarray | None = None,
    reduction: str = "none",
    wrt: str = "logit",
    n: int | None = None,
) -> np.ndarray:
    """Indices where a kernel output ``z`` is off the reference: ints exactly, floats within the
    dtype's tolerance. ``pos_weight`` may be full or [C]; ``n`` as in ``reference``."""
    args = (grad, p, y, weight, pos_weight)
    if np.issubdtype(z.dtype, np.integer):
        return np.flatnonzero(z != integer_reference(*args))
    ref = reference(*args, reduction, wrt, n)
    size = terms(*args, reduction, wrt, n)
    return mismatches(z, ref, size, cancels=pos_weight is not None or wrt == "probability")


#: The fused mode's tolerance, relative to the size of its terms: one output rounding of the dtype and float32
#: compute (the golden suite holds the twin to it against autograd; the gate holds tuned tilings to it).
FUSED_RTOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


def fused_reference(
    x: np.ndarray, y: np.ndarray, weight: np.ndarray | None, pos_weight: np.ndarray | None, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """BCEWithLogits per element in float64 (weight and pos_weight broadcast to x): (loss, dx at grad_output 1
    times ``scale``, the size of the loss's terms, the size of dx's), the closed form of autograd's."""
    xs, ys = x.astype(np.float64), y.astype(np.float64)
    w = np.broadcast_to(1.0 if weight is None else weight.astype(np.float64), xs.shape)
    pw = np.broadcast_to(1.0 if pos_weight is None else pos_weight.astype(np.float64), xs.shape)
    coef = 1 + (pw - 1) * ys
    softplus = np.logaddexp(0.0, -xs)
    sigmoid = 0.5 * (1 + np.tanh(xs / 2))
    loss = w * ((1 - ys) * xs + coef * softplus)
    dx = w * (coef * sigmoid - pw * ys) * scale
    loss_size = np.abs(w) * (np.abs(1 - ys) * np.abs(xs) + np.abs(coef) * softplus)
    dx_size = np.abs(w) * (np.abs(coef) * sigmoid + np.abs(pw * ys)) * abs(scale)
    return loss, dx, loss_size, dx_size


def wrong_fused_elements(got: np.ndarray, ref: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Indices where a fused output is off its float64 reference by more than the dtype allows (FUSED_RTOL of
    the terms' size, and the dtype's spacing below its smallest normal)."""
    name = "bfloat16" if got.dtype == ml_dtypes.bfloat16 else str(got.dtype)
    floor = float(np.finfo(got.dtype).smallest_normal)
    err = np.abs(got.reshape(-1).astype(np.float64) - ref.reshape(-1))
    return np.flatnonzero(~(err <= FUSED_RTOL[name] * size.reshape(-1) + floor))

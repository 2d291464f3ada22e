"""Fit the cost model's free parameters to measured kernel times.

Free parameters: ``launch_us`` (fixed per launch), ``core_start_us`` (per core before its
first copy), ``hbm_gbps`` (aggregate HBM bandwidth) and ``l2_gbps`` (aggregate bandwidth of
L2 hits, used where the measurement left L2 warm or in the steady state of repeated launches).
They are fitted by least squares on the log of predicted over measured time, so a 10% miss
weighs the same at 5 us and at 500 us. (``tiling_model.crossval`` fits the shipped profiles on
every measured operator; this module fits your own measurements of one kernel.)

Inputs: CSV files in the calibration-set format (``case,shape,dtype,...,measured_device_us``,
one named kernel per file) and JSON-lines measurement records (one object per line:
``kernel``, ``shape``, ``params``, ``measured_us``, optional ``l2``), as the tuner's NPU
backend writes them.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from tiling_model.errors import BadRequest
from tiling_model.kernels import ElementwiseKernel, bce_grad_kernel, elementwise_kernel
from tiling_model.simulate import L2_STATES, L2State
from tiling_model.soc import SocProfile
from tiling_model.tiling import TilingParams, element_count, params_from_dict, tile_kernel
from tiling_model.variant import Variant

FREE_PARAMS = ("launch_us", "core_start_us", "hbm_gbps", "l2_gbps")
BOUNDS = {
    "launch_us": (0.0, 50.0),
    "core_start_us": (0.0, 20.0),
    "hbm_gbps": (50.0, 5000.0),
    "l2_gbps": (50.0, 20000.0),
}
#: Kernels a calibration CSV can name. Sigmoid: y = 1 / (1 + exp(-x)).
NAMED_KERNELS = {"sigmoid": (1, 1, ("muls", "exp", "adds", "rec"))}


class CalibrationError(BadRequest):
    """Unusable calibration input; the message names the file, the line and the problem."""


@dataclass(frozen=True)
class CalibrationCase:
    source: str  # file:line
    kernel: ElementwiseKernel
    shape: tuple[int, ...]
    params: TilingParams
    measured_us: float
    warm_l2: L2State  # the L2 state the measurement saw (simulate.L2State)


def named_kernel(name: str, dtype: str) -> ElementwiseKernel:
    if name not in NAMED_KERNELS:
        raise CalibrationError(f"unknown kernel {name!r}; known: {', '.join(NAMED_KERNELS)}")
    inputs, outputs, ops = NAMED_KERNELS[name]
    return elementwise_kernel(dtype, inputs, outputs, ops, name=name)


def read_csv(path: Path, kernel_name: str, warm_l2: L2State = "steady") -> list[CalibrationCase]:
    """Calibration-set CSV: shape as ``AxBxC``, dtype, and ``measured_device_us``."""
    out = []
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read ({e.strerror})") from None
    for i, row in enumerate(rows, start=2):
        where = f"{path}:{i}"
        try:
            shape = tuple(int(x) for x in row["shape"].split("x"))
            us = float(row["measured_device_us"])
            kernel = named_kernel(kernel_name, row["dtype"])
        except (KeyError, ValueError, AttributeError) as e:
            raise CalibrationError(f"{where}: {e}") from None
        if us <= 0:
            raise CalibrationError(f"{where}: measured time must be positive")
        out.append(CalibrationCase(where, kernel, shape, TilingParams(), us, warm_l2))
    return out


def _record_kernel(spec: dict[str, Any]) -> ElementwiseKernel:
    kind = spec.get("kind")
    if kind == "bce_grad":
        variant = Variant(
            spec["dtype"],
            spec.get("reduction", "none"),
            spec.get("weight", True),
            spec.get("pos_weight", "none"),
            spec.get("wrt", "logit"),
        )
        return bce_grad_kernel(variant, "exact", spec.get("classes", 1))
    if kind == "elementwise":
        return elementwise_kernel(spec["dtype"], spec["inputs"], spec["outputs"], spec["ops"], spec.get("scalars", 0))
    if kind in NAMED_KERNELS:
        return named_kernel(kind, spec["dtype"])
    raise ValueError(f"kernel.kind must be bce_grad, elementwise or one of {', '.join(NAMED_KERNELS)}")


def read_jsonl(path: Path) -> list[CalibrationCase]:
    """Measurement records, one JSON object per line (blank lines skipped)."""
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read ({e.strerror})") from None
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            rec = json.loads(line)
            kernel = _record_kernel(rec["kernel"])
            shape = tuple(rec["shape"])
            element_count(shape)
            params = params_from_dict(rec.get("params"))
            us = float(rec["measured_us"])
            warm = L2_STATES[rec.get("l2", "cold")]  # the NPU backend flushes L2 between repetitions
        except json.JSONDecodeError as e:
            raise CalibrationError(f"{where}: not valid JSON ({e.msg})") from None
        except (KeyError, ValueError, TypeError) as e:
            raise CalibrationError(f"{where}: {type(e).__name__}: {e}") from None
        if us <= 0:
            raise CalibrationError(f"{where}: measured_us must be positive")
        out.append(CalibrationCase(where, kernel, shape, params, us, warm))
    return out


def predict_measurement(m: CalibrationCase, soc: SocProfile) -> float:
    from tiling_model.cost import predict  # local: cost imports tiling, which is fine either way

    t = tile_kernel(m.kernel, m.shape, m.params, soc)
    return predict(t, soc, m.warm_l2)


@dataclass(frozen=True)
class CalibrationResult:
    profile: SocProfile
    before: dict[str, float]
    after: dict[str, float]
    residuals: list[dict[str, Any]]
    median_abs_rel_error: float
    worst_abs_rel_error: float
    median_before: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "fitted": self.after,
            "starting_values": self.before,
            "cases": len(self.residuals),
            "median_abs_rel_error": round(self.median_abs_rel_error, 4),
            "worst_abs_rel_error": round(self.worst_abs_rel_error, 4),
            "median_abs_rel_error_before": round(self.median_before, 4),
            "residuals": self.residuals,
        }


def _errors(soc: SocProfile, data: list[CalibrationCase]) -> np.ndarray:
    pred = np.array([predict_measurement(m, soc) for m in data])
    meas = np.array([m.measured_us for m in data])
    errors: np.ndarray = pred / meas - 1.0
    return errors


def calibrate(soc: SocProfile, data: list[CalibrationCase], free: tuple[str, ...] = FREE_PARAMS) -> CalibrationResult:
    """Least-squares fit of ``free`` profile fields to ``data``; returns the refitted profile."""
    if not data:
        raise CalibrationError("no measurements to calibrate against")
    unknown = [p for p in free if p not in BOUNDS]
    if unknown:
        raise CalibrationError(f"cannot fit {', '.join(unknown)}; free parameters: {', '.join(FREE_PARAMS)}")
    x0 = np.array([getattr(soc, p) for p in free], dtype=float)
    lo = np.array([BOUNDS[p][0] for p in free])
    # effective bandwidths cannot exceed the physical peaks the roofline uses
    peaks = {"hbm_gbps": soc.hbm_peak_gbps, "l2_gbps": soc.l2_peak_gbps}
    hi = np.array([min(BOUNDS[p][1], peaks.get(p, np.inf)) for p in free])

    def with_values(x: np.ndarray) -> SocProfile:
        values: dict[str, Any] = {p: float(v) for p, v in zip(free, x, strict=True)}
        return replace(soc, **values)

    def residual(x: np.ndarray) -> np.ndarray:
        logs: np.ndarray = np.log1p(_errors(with_values(x), data))
        return logs

    before = np.abs(_errors(soc, data))
    fit = least_squares(residual, np.clip(x0, lo, hi), bounds=(lo, hi), x_scale="jac", diff_step=1e-3)
    fitted = with_values(fit.x)
    errs = _errors(fitted, data)
    rows = [
        {
            "case": m.source,
            "shape": list(m.shape),
            "dtype": m.kernel.dtype,
            "kernel": m.kernel.name,
            "measured_us": m.measured_us,
            "predicted_us": round(m.measured_us * (1 + e), 4),
            "rel_error": round(e, 4),
        }
        for m, e in zip(data, errs, strict=True)
    ]
    return CalibrationResult(
        profile=fitted,
        before={p: float(v) for p, v in zip(free, x0, strict=True)},
        after={p: round(float(v), 4) for p, v in zip(free, fit.x, strict=True)},
        residuals=rows,
        median_abs_rel_error=float(np.median(np.abs(errs))),
        worst_abs_rel_error=float(np.max(np.abs(errs))),
        median_before=float(np.median(before)),
    )

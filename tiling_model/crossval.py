"""The cost model against measured operators it was not fitted on: leave-one-operator-out.

The calibration data (``data/calibration``: Sigmoid and six more CANN-Bench operators on the
Ascend910B2) are read as elementwise launches (a composite reference is the sum of its kernels, each
its own launch). Per-SoC hardware parameters only are fitted (launch, core start, HBM and L2
bandwidth, and the steady-state L2 curve), never a per-operator constant; each operator is predicted
by a fit on all the others, and the errors are reported per operator and per traffic class.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from tiling_model.calibrate import CalibrationError, read_csv
from tiling_model.cost import predict
from tiling_model.kernels import elementwise_kernel
from tiling_model.simulate import L2State, SteadyL2
from tiling_model.soc import SocProfile
from tiling_model.tiling import TilingData, TilingParams, tile_kernel

#: Free parameters, their bounds and the regime they serve. Bandwidths stay below their peaks.
PARAMS = (
    "launch_us",
    "core_start_us",
    "hbm_gbps",
    "l2_gbps",
    "l2_half_mib",
    "l2_falloff",
    "vector_cycle_scale",
    "vector_cycle_scale_half",
)
BOUNDS: dict[str, tuple[float, float]] = {
    "launch_us": (0.5, 20.0),
    "core_start_us": (0.0, 10.0),
    "hbm_gbps": (200.0, 5000.0),  # capped at the SoC's hbm_peak_gbps below
    "l2_gbps": (200.0, 20000.0),  # capped at l2_peak_gbps
    "l2_half_mib": (8.0, 1024.0),  # capped at the L2 size: half the traffic hitting needs it resident
    "l2_falloff": (0.5, 8.0),
    # cycles per 256-B repeat are MSKPP's issue rates; a kernel's chain of dependent instructions (and
    # the casts around half types) takes longer: one factor on every vector instruction, at least 1
    "vector_cycle_scale": (1.0, 6.0),
    "vector_cycle_scale_half": (1.0, 6.0),  # the same for kernels on 2-byte types (their casts, their chains)
}
TRAFFIC_CLASSES = (("< 4 MB", 0.0, 4e6), ("4-100 MB", 4e6, 100e6), ("> 100 MB", 100e6, float("inf")))


@dataclass(frozen=True)
class Measured:
    """One measured operator call: its launches (each a tiling of an elementwise kernel), the time."""

    op: str
    source: str  # file:line
    launches: tuple[TilingData, ...]
    measured_us: float
    primary: bool  # False: the reading overstates the traffic (``status`` approx)

    @property
    def traffic_bytes(self) -> int:
        return sum(t.kernel.streams * t.n * t.elem_bytes for t in self.launches)


def _launch(spec: str, soc: SocProfile, where: str) -> TilingData:
    """``n:dtype:inputs:outputs:op+op+...`` (``-``: a copy, no vector op) as the model's default tiling."""
    try:
        n, dtype, inputs, outputs, ops = spec.split(":")
        names = [] if ops == "-" else ops.split("+")
        kernel = elementwise_kernel(dtype, int(inputs), int(outputs), names, name=ops)
        return tile_kernel(kernel, [int(n)], TilingParams(), soc)
    except (ValueError, CalibrationError) as e:
        raise CalibrationError(f"{where}: kernel {spec!r}: {e}") from None


def read_cannbench(path: Path, soc: SocProfile) -> list[Measured]:
    """``cannbench_910b2_elementwise.csv``: op, shape, dtype, measured_device_us, status, kernels."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read ({e.strerror})") from None
    out = []
    for i, row in enumerate(rows, start=2):
        where = f"{path.name}:{i}"
        try:
            us = float(row["measured_device_us"])
            launches = tuple(_launch(spec, soc, where) for spec in row["kernels"].split(";"))
            out.append(Measured(row["op"], where, launches, us, row["status"] == "primary"))
        except (KeyError, ValueError) as e:
            raise CalibrationError(f"{where}: {e}") from None
    return out


def read_sigmoid(path: Path, soc: SocProfile) -> list[Measured]:
    """``sigmoid_910b2.csv`` through ``calibrate.read_csv``: one launch each."""
    return [
        Measured("sigmoid", c.source, (tile_kernel(c.kernel, c.shape, c.params, soc),), c.measured_us, True)
        for c in read_csv(path, "sigmoid")
    ]


def read_all(directory: Path, soc: SocProfile) -> list[Measured]:
    return read_sigmoid(directory / "sigmoid_910b2.csv", soc) + read_cannbench(
        directory / "cannbench_910b2_elementwise.csv", soc
    )


@dataclass(frozen=True)
class Fitted:
    values: dict[str, float]

    def apply(self, soc: SocProfile) -> tuple[SocProfile, L2State]:
        """The profile with the fitted hardware values (for 4-byte types), and the L2 state."""
        return self.profile_for(soc, 4), self.l2()

    def profile_for(self, soc: SocProfile, elem_bytes: int) -> SocProfile:
        v = self.values
        hardware: dict[str, Any] = {k: v[k] for k in ("launch_us", "core_start_us", "hbm_gbps", "l2_gbps") if k in v}
        scale = v.get(
            "vector_cycle_scale_half" if elem_bytes == 2 else "vector_cycle_scale", v.get("vector_cycle_scale")
        )
        if scale is not None:  # the simulator divides cycles by the clock: scale them through it
            hardware["clock_mhz"] = soc.clock_mhz / scale
        return replace(soc, **hardware)

    def l2(self) -> L2State:
        v = self.values
        return SteadyL2(v["l2_half_mib"] * 2**20, v["l2_falloff"]) if "l2_half_mib" in v else False


def predicted_us(m: Measured, soc: SocProfile, l2: L2State, fitted: Fitted | None = None) -> float:
    return sum(predict(t, fitted.profile_for(soc, t.elem_bytes) if fitted else soc, l2) for t in m.launches)


def errors(cases: Sequence[Measured], soc: SocProfile, l2: L2State, fitted: Fitted | None = None) -> np.ndarray:
    pred = np.array([predicted_us(m, soc, l2, fitted) for m in cases])
    meas = np.array([m.measured_us for m in cases])
    out: np.ndarray = pred / meas - 1.0
    return out


def fit(cases: Sequence[Measured], soc: SocProfile, free: tuple[str, ...] = PARAMS) -> Fitted:
    """Least squares on log(predicted / measured) over ``cases`` (primary ones only)."""
    data = [m for m in cases if m.primary]
    if not data:
        raise CalibrationError("no primary measurements to fit")
    peaks = {"hbm_gbps": soc.hbm_peak_gbps, "l2_gbps": soc.l2_peak_gbps, "l2_half_mib": soc.l2_bytes / 2**20}
    lo = np.array([BOUNDS[p][0] for p in free])
    hi = np.array([min(BOUNDS[p][1], peaks.get(p, np.inf)) for p in free])
    start = {"l2_half_mib": soc.l2_bytes / 2**21, "l2_falloff": 2.0, "vector_cycle_scale": 1.5}
    start["vector_cycle_scale_half"] = 1.5
    x0 = np.clip([start.get(p, getattr(soc, p, 1.0)) for p in free], lo, hi)

    def residual(x: np.ndarray) -> np.ndarray:
        fitted = Fitted(dict(zip(free, map(float, x), strict=True)))
        logs: np.ndarray = np.log1p(errors(data, soc, fitted.l2(), fitted))
        return logs

    result = least_squares(
        residual, x0, bounds=(lo, hi), x_scale="jac", diff_step=1e-3, max_nfev=60, loss="soft_l1", f_scale=0.1
    )
    return Fitted({p: round(float(v), 4) for p, v in zip(free, result.x, strict=True)})


def _stats(e: np.ndarray) -> dict[str, Any]:
    a = np.abs(e)
    if a.size == 0:
        return {"cases": 0}
    return {
        "cases": int(a.size),
        "median": round(float(np.median(a)), 4),
        "p90": round(float(np.percentile(a, 90)), 4),
        "worst": round(float(a.max()), 4),
        "bias": round(float(np.median(e)), 4),  # > 0: the model is too slow
    }


def report(cases: Sequence[Measured], errs: np.ndarray) -> dict[str, Any]:
    """Median / p90 / worst |error| per operator, per traffic class and overall (primary cases)."""
    primary = np.array([m.primary for m in cases])
    ops = sorted({m.op for m in cases})
    traffic = np.array([m.traffic_bytes for m in cases])
    return {
        "overall": _stats(errs[primary]),
        "by_operator": {op: _stats(errs[primary & np.array([m.op == op for m in cases])]) for op in ops},
        "by_traffic": {
            name: _stats(errs[primary & (traffic >= lo) & (traffic < hi)]) for name, lo, hi in TRAFFIC_CLASSES
        },
        "approx_cases": _stats(errs[~primary]),
    }


def leave_one_operator_out(cases: Sequence[Measured], soc: SocProfile) -> tuple[np.ndarray, dict[str, Fitted]]:
    """Each operator predicted by a fit on all the others: the errors, and each fold's parameters."""
    errs = np.zeros(len(cases))
    fits: dict[str, Fitted] = {}
    for op in sorted({m.op for m in cases}):
        train = [m for m in cases if m.op != op]
        fits[op] = fit(train, soc)
        held = [i for i, m in enumerate(cases) if m.op == op]
        errs[held] = errors([cases[i] for i in held], soc, fits[op].l2(), fits[op])
    return errs, fits

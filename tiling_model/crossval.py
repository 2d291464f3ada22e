"""The cost model against measured operators it was not fitted on: leave-one-operator-out.

The calibration data (``data/calibration``: Sigmoid and six more CANN-Bench operators on the
Ascend910B2) are read as elementwise launches (a composite reference is the sum of its kernels, each
its own launch). Per-SoC hardware parameters only are fitted (launch, core start, HBM and L2
bandwidth, and the steady-state L2 curve), never a per-operator constant; each operator is predicted
by a fit on all the others, and the errors are reported per operator and per traffic class.
``calibrate_all`` is the shipped calibration (the fit on every operator, which ``python -m
tiling_model calibrate --write`` puts into the profiles, and its held-out errors).
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
from tiling_model.kernels import VECTOR_OPS, elementwise_kernel
from tiling_model.simulate import DEFAULT_L2, L2State
from tiling_model.soc import SocProfile
from tiling_model.tiling import TilingData, TilingParams, tile_kernel

#: Free parameters: SoC profile fields, each bounded by physics. Bandwidths stay below their peaks.
PARAMS = (
    "launch_us",
    "core_start_us",
    "hbm_gbps",
    "l2_gbps",
    "l2_half_bytes",
    "l2_falloff",
)
#: Fitted when asked (``fit(..., free=...)``, e.g. on your own NPU's records), not by default: the
#: calibration's two vector-bound operators (GELU and Mish on half types) ask for factors 35% apart, so
#: a factor fitted on one misses the other by as much; MSKPP's measured issue rates (factor 1) do better
#: held out.
OPTIONAL_PARAMS = ("vector_cycle_scale",)
MIB = 2**20
BOUNDS: dict[str, tuple[float, float]] = {
    "launch_us": (0.5, 20.0),
    "core_start_us": (0.0, 10.0),
    # between HBM_FLOOR and 1 x the SoC's hbm_peak_gbps (below)
    "hbm_gbps": (200.0, 5000.0),
    "l2_gbps": (200.0, 20000.0),  # capped at l2_peak_gbps
    # capped at twice the L2 size: past it the resident share (l2_bytes / footprint < 1/2) decides anyway
    "l2_half_bytes": (8.0 * MIB, 2048.0 * MIB),
    "l2_falloff": (0.5, 8.0),
    # cycles per 256-B repeat are MSKPP's issue rates; a kernel's chain of dependent instructions (and
    # the casts around half types) takes longer: one factor on every vector instruction, at least 1
    "vector_cycle_scale": (1.0, 6.0),
}
#: A streaming kernel on A2 reaches 1.3-1.5 TB/s of the nominal 1.6 (shared/reference/ascend-a2-hardware.md,
#: "aggregate streaming ceiling"): the fitted HBM rate stays at or above this share of the peak.
HBM_FLOOR = 0.8
#: Robust least squares: a case off by much more than F_SCALE in log time (about 20%: an implementation's
#: fixed cost, a misread kernel) pulls on the fit like arctan, not like its square.
LOSS = "arctan"
F_SCALE = 0.2
MAX_NFEV = 80
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


def read_readings(path: Path) -> dict[str, str]:
    """``kernel_readings.csv``: op, ops, source: an operator's instruction list read from the kernel its
    SoC runs, in place of the data file's reading (each row names its source)."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read ({e.strerror})") from None
    out: dict[str, str] = {}
    for i, row in enumerate(rows, start=2):
        op, ops, source = (row.get(k) or "" for k in ("op", "ops", "source"))
        unknown = [o for o in ops.split("+") if o not in VECTOR_OPS]
        if not op or not source.strip() or unknown or op in out:
            why = f"unknown op(s) {', '.join(unknown)}" if unknown else "needs op, ops and source, one row per op"
            raise CalibrationError(f"{path.name}:{i}: {why}")
        out[op] = ops
    return out


def read_cannbench(path: Path, soc: SocProfile, readings: dict[str, str] | None = None) -> list[Measured]:
    """``cannbench_910b2_elementwise.csv``: op, shape, dtype, measured_device_us, status, kernels; an op
    in ``readings`` (single-kernel cases only) computes that instruction list instead."""
    try:
        rows = list(csv.DictReader(path.open()))
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read ({e.strerror})") from None
    out = []
    for i, row in enumerate(rows, start=2):
        where = f"{path.name}:{i}"
        try:
            us = float(row["measured_device_us"])
            specs = row["kernels"].split(";")
            if readings and row["op"] in readings:
                if len(specs) != 1:
                    raise ValueError(f"a reading of {row['op']!r} replaces one kernel's ops, not a composite's")
                specs = [":".join([*specs[0].split(":")[:4], readings[row["op"]]])]
            launches = tuple(_launch(spec, soc, where) for spec in specs)
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


#: The shipped measurements in ``data/calibration``: the Sigmoid set, the CANN-Bench set, and the
#: instruction lists read from the kernels the 910B runs where the CANN-Bench reading took another's.
CALIBRATION_FILES = ("sigmoid_910b2.csv", "cannbench_910b2_elementwise.csv", "kernel_readings.csv")


def read_all(directory: Path, soc: SocProfile) -> list[Measured]:
    sigmoid, cannbench, readings = (directory / f for f in CALIBRATION_FILES)
    return read_sigmoid(sigmoid, soc) + read_cannbench(cannbench, soc, read_readings(readings))


@dataclass(frozen=True)
class Fitted:
    """Fitted values of profile fields (``PARAMS``); predictions use the steady-state L2 they describe."""

    values: dict[str, float]

    def apply(self, soc: SocProfile) -> SocProfile:
        values: dict[str, Any] = dict(self.values)
        return replace(soc, **values)


def predicted_us(m: Measured, soc: SocProfile, l2: L2State = DEFAULT_L2) -> float:
    return sum(predict(t, soc, l2) for t in m.launches)


def errors(cases: Sequence[Measured], soc: SocProfile, l2: L2State = DEFAULT_L2) -> np.ndarray:
    pred = np.array([predicted_us(m, soc, l2) for m in cases])
    meas = np.array([m.measured_us for m in cases])
    out: np.ndarray = pred / meas - 1.0
    return out


def fit(cases: Sequence[Measured], soc: SocProfile, free: tuple[str, ...] = PARAMS, f_scale: float = F_SCALE) -> Fitted:
    """Least squares on log(predicted / measured) over ``cases`` (primary ones only)."""
    data = [m for m in cases if m.primary]
    if not data:
        raise CalibrationError("no primary measurements to fit")
    unknown = [p for p in free if p not in BOUNDS]
    if unknown:
        raise CalibrationError(f"cannot fit {', '.join(unknown)}; free parameters: {', '.join(BOUNDS)}")
    peaks = {"hbm_gbps": soc.hbm_peak_gbps, "l2_gbps": soc.l2_peak_gbps, "l2_half_bytes": 2.0 * soc.l2_bytes}
    floors = {"hbm_gbps": HBM_FLOOR * soc.hbm_peak_gbps}
    lo = np.array([max(BOUNDS[p][0], floors.get(p, -np.inf)) for p in free])
    hi = np.array([min(BOUNDS[p][1], peaks.get(p, np.inf)) for p in free])
    lo = np.where(lo < hi, lo, hi / 2)  # a small L2 (310B1: 4 MiB) caps the half point below its usual floor
    start = {"launch_us": 2.0, "core_start_us": 0.3, "hbm_gbps": soc.hbm_peak_gbps, "l2_gbps": soc.l2_peak_gbps / 2}
    start |= {"l2_half_bytes": soc.l2_bytes / 2, "l2_falloff": 2.0, "vector_cycle_scale": 1.5}
    x0 = np.clip([start[p] for p in free], lo, hi)
    scale = np.maximum(np.abs(x0), 1e-3)  # fit in units of the start: MiB and GB/s on one footing

    def residual(u: np.ndarray) -> np.ndarray:
        fitted = Fitted(dict(zip(free, map(float, u * scale), strict=True)))
        logs: np.ndarray = np.log1p(errors(data, fitted.apply(soc), DEFAULT_L2))
        return logs

    result = least_squares(
        residual, x0 / scale, bounds=(lo / scale, hi / scale), diff_step=1e-3, max_nfev=MAX_NFEV, loss=LOSS,
        f_scale=f_scale,
    )  # fmt: skip
    return Fitted({p: _round(p, float(v)) for p, v in zip(free, result.x * scale, strict=True)})


def _round(param: str, value: float) -> float:
    return float(round(value)) if param == "l2_half_bytes" else round(value, 4)


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


def leave_one_operator_out(
    cases: Sequence[Measured], soc: SocProfile, f_scale: float = F_SCALE
) -> tuple[np.ndarray, dict[str, Fitted]]:
    """Each operator predicted by a fit on all the others: the errors, and each fold's parameters."""
    errs = np.zeros(len(cases))
    fits: dict[str, Fitted] = {}
    for op in sorted({m.op for m in cases}):
        train = [m for m in cases if m.op != op]
        fits[op] = fit(train, soc, f_scale=f_scale)
        held = [i for i, m in enumerate(cases) if m.op == op]
        errs[held] = errors([cases[i] for i in held], fits[op].apply(soc))
    return errs, fits


def _median(cases: Sequence[Measured], errs: np.ndarray) -> float:
    primary = np.array([m.primary for m in cases])
    return float(np.median(np.abs(errs[primary])))


def loss_scale_study(
    directory: Path, soc: SocProfile, scales: Sequence[float] = (0.1, 0.15, 0.2, 0.3)
) -> dict[str, Any]:
    """How much the held-out figure owes to the choice of F_SCALE: the leave-one-operator-out median at
    each scale, and a nested estimate where each fold picks its scale by a leave-one-operator-out of its
    own training operators (the held-out operator plays no part in the choice). As ``calibrate_all``
    fits (vector factor 1); minutes, not seconds."""
    soc = replace(soc, vector_cycle_scale=1.0)
    cases = read_all(directory, soc)
    fixed = {str(f): round(_median(cases, leave_one_operator_out(cases, soc, f)[0]), 4) for f in scales}
    errs = np.zeros(len(cases))
    chosen: dict[str, float] = {}
    for op in sorted({m.op for m in cases}):
        train = [m for m in cases if m.op != op]
        inner = {f: _median(train, leave_one_operator_out(train, soc, f)[0]) for f in scales}
        chosen[op] = min(scales, key=lambda f: (inner[f], f))
        held = [i for i, m in enumerate(cases) if m.op == op]
        errs[held] = errors([cases[i] for i in held], fit(train, soc, f_scale=chosen[op]).apply(soc))
    return {"fixed": fixed, "nested": round(_median(cases, errs), 4), "chosen": chosen, "shipped": F_SCALE}


#: How each fitted value carries over to a SoC without measurements (its INI-formula peaks and its L2
#: size against the measured SoC's); the rest is taken as it is. All of them are estimates.
CARRY = {"hbm_gbps": "hbm_peak_gbps", "l2_gbps": "l2_peak_gbps", "l2_half_bytes": "l2_bytes"}


def derived_values(fitted: Fitted, measured: SocProfile, target: SocProfile) -> dict[str, float]:
    """The fitted values carried to ``target``: bandwidths by the ratio of the INI-formula peaks (and
    never above the target's peak), the L2 half point by the L2 sizes; launch, core start, the L2
    falloff and the vector factor unchanged."""
    out: dict[str, float] = {}
    for p, v in fitted.values.items():
        if p in CARRY:
            ratio = float(getattr(target, CARRY[p])) / float(getattr(measured, CARRY[p]))
            v = v * ratio
            if p in ("hbm_gbps", "l2_gbps"):
                v = min(v, getattr(target, p.replace("_gbps", "_peak_gbps")))
        out[p] = _round(p, v)
    return out


def profile_document(
    target: SocProfile, measured: SocProfile, fitted: Fitted, summary: dict[str, Any]
) -> dict[str, Any]:
    """``target``'s profile JSON with the fitted (or, for another SoC, derived) values and their sources."""
    from tiling_model.soc import profile_to_json

    doc = profile_to_json(target)
    own = target.name == measured.name
    values = fitted.values if own else derived_values(fitted, measured, target)
    how = (
        f"fitted by `python -m tiling_model calibrate --write` on {', '.join(summary['data'])} "
        f"({summary['cases']} primary cases of {summary['operators']} operators; "
        f"in-sample median |error| {100 * summary['median']:.1f}%, "
        f"leave-one-operator-out {100 * summary['loo_median']:.1f}%)"
    )
    doc["vector_cycle_scale"] = 1.0
    doc["sources"]["vector_cycle_scale"] = (
        "1: MSKPP's measured issue rates as they are (data/mskpp_vector_instr_910b1.csv); not fitted by default "
        "(tiling_model.crossval.OPTIONAL_PARAMS says why)"
    )
    for p, v in values.items():
        doc[p] = v
        if own:
            doc["sources"][p] = how
        else:
            basis = f" x {CARRY[p]} ratio" if p in CARRY else ""
            doc["sources"][p] = (
                f"{measured.name} value{basis} [EST: no measurements for this SoC]; {measured.name}: {how}"
            )
    doc["calibration"] = {"measured_on": measured.name, "fitted": fitted.values} | summary
    return doc


@dataclass(frozen=True)
class Calibration:
    """The shipped calibration: the fit on every operator, its errors, and the leave-one-operator-out
    errors of the same procedure (the figure to trust for an operator the fit has not seen)."""

    measured: SocProfile  # the profile the data was fitted against (unfitted fields as sourced)
    cases: list[Measured]
    fitted: Fitted
    in_sample: np.ndarray
    held_out: np.ndarray | None
    folds: dict[str, Fitted]

    def summary(self, data: list[str]) -> dict[str, Any]:
        r = report(self.cases, self.in_sample)["overall"]
        out = {"cases": r["cases"], "operators": len({m.op for m in self.cases}), "median": r["median"], "data": data}
        if self.held_out is not None:
            loo = report(self.cases, self.held_out)["overall"]
            out |= {"loo_median": loo["median"], "loo_p90": loo["p90"]}
        return out


def calibrate_all(directory: Path, soc: SocProfile, loo: bool = True) -> Calibration:
    """Fit ``PARAMS`` on every calibration case (``vector_cycle_scale`` at MSKPP's rates, 1), and
    cross-validate the same fit leaving each operator out."""
    base = replace(soc, vector_cycle_scale=1.0)
    cases = read_all(directory, base)
    fitted = fit(cases, base)
    in_sample = errors(cases, fitted.apply(base))
    held_out, folds = leave_one_operator_out(cases, base) if loo else (None, {})
    return Calibration(base, cases, fitted, in_sample, held_out, folds)

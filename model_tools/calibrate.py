"""Fit the cost model's per-SoC hardware parameters to measured kernel times: the one calibration path.

Every measurement is a ``Measured``: one operator call (its launches, each a tiling of an elementwise
kernel), the time, and the L2 state it was measured in. They come from
- the shipped measurements in ``data/calibration`` (Huawei's kernels, timed by CANN-Bench with
  repeated launches: the steady L2 state): ``read_all``;
- calibration-set CSV files of one named kernel (``read_csv``);
- the tuner's own records (``python -m tuner sweep --records runs.jsonl``: bcetune's kernel, its
  tiling, the measured median, cold L2 as the NPU backend times it): ``read_records``.

``fit`` is a robust least-squares fit of log(predicted / measured) (arctan loss: a case off by far more
than ~20%, an implementation's fixed cost, pulls like arctan, not like its square) of chosen profile
fields, each bounded by physics: bandwidths below their peaks and HBM at or above 80% of it, the L2 half
point within twice the L2. It makes the shipped profiles (``model_tools.crossval.calibrate_all``),
refits a profile to your own measurements (``calibrate``), and learns a device from a sweep's records
(``fit_device``: the hardware parameters, then the knob correction of ``tiling_model.correction`` on
what they leave).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from tiling_model import engine
from tiling_model.confidence import TRAFFIC_CLASSES
from tiling_model.correction import IDENTITY, KnobCorrection, fit_correction
from tiling_model.cost import predict
from tiling_model.errors import BadRequest
from tiling_model.kernels import NAMED_KERNELS, VECTOR_OPS, ElementwiseKernel, elementwise_kernel
from tiling_model.model_types import DEFAULT_L2, L2_STATES, L2State
from tiling_model.residual import FEATURES as RESIDUAL_FEATURES
from tiling_model.residual import NONE as NO_RESIDUAL
from tiling_model.residual import Residual, fit_residual
from tiling_model.residual import levels as residual_levels
from tiling_model.soc import SocProfile, rehashed
from tiling_model.tiling import (
    KNOB_NAMES,
    TilingData,
    TilingParams,
    compute_tiling,
    element_count,
    params_from_dict,
    tile_kernel,
)
from tiling_model.variant import Variant

#: The shipped fit's free parameters: SoC profile fields, each bounded by physics.
PARAMS = ("launch_us", "core_start_us", "hbm_gbps", "l2_gbps", "l2_half_bytes", "l2_falloff")
#: What a device's own records of bcetune's kernel fit (cold L2: the L2 fields do not enter): the fixed
#: costs, the HBM rate, a scale on each DMA curve and the vector start-up cycles, the parameters a device
#: differs from the profile in.
DEVICE_PARAMS = ("launch_us", "core_start_us", "hbm_gbps", "mte2_scale", "mte3_scale", "vector_start_cycles")
#: Fitted when asked (``--free``), not by default: the calibration's two vector-bound operators (GELU
#: and Mish on half types) ask for factors 35% apart, so a factor fitted on one misses the other by as
#: much; MSKPP's measured issue rates (factor 1) do better held out.
OPTIONAL_PARAMS = ("vector_cycle_scale",)
#: Not profile fields: a factor on every point of a DMA curve (the fitted curve goes into the profile).
CURVE_SCALES = {"mte2_scale": "mte2_curve_kib_us", "mte3_scale": "mte3_curve_kib_us"}
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
    "vector_start_cycles": (0.0, 200.0),
    # a device's DMA engines within a factor of 2 of MSKPP's single-core tables, either way
    "mte2_scale": (0.5, 2.0),
    "mte3_scale": (0.5, 2.0),
}
#: A streaming kernel on A2 reaches 1.3-1.5 TB/s of the nominal 1.6 (shared/reference/ascend-a2-hardware.md,
#: "aggregate streaming ceiling"): the fitted HBM rate stays at or above this share of the peak.
HBM_FLOOR = 0.8
LOSS = "arctan"
F_SCALE = 0.2
MAX_NFEV = 80
#: The shipped measurements in ``data/calibration``: the Sigmoid set, the CANN-Bench set, and the
#: instruction lists read from the kernels the 910B runs where the CANN-Bench reading took another's.
CALIBRATION_FILES = ("sigmoid_910b2.csv", "cannbench_910b2_elementwise.csv", "kernel_readings.csv")
#: CANN-Bench times repeated launches after one flush: the steady state of L2.
SHIPPED_L2: L2State = "steady"


class CalibrationError(BadRequest):
    """Unusable calibration input; the message names the file, the line and the problem."""


@dataclass(frozen=True)
class Measured:
    """One measured operator call: its launches (each a tiling of an elementwise kernel), the time."""

    op: str  # the operator ("sigmoid", "gelu", ...; "bce_grad" for the tuner's records)
    source: str  # file:line
    launches: tuple[TilingData, ...]
    measured_us: float
    primary: bool = True  # False: the reading overstates the traffic (``status`` approx)
    l2: L2State = DEFAULT_L2  # the L2 state the measurement saw
    key: str = ""  # the tuner's records: the study key (SoC, variant, size), for folds by key

    @property
    def traffic_bytes(self) -> int:
        return sum(t.kernel.streams * t.n * t.elem_bytes for t in self.launches)


def named_kernel(name: str, dtype: str) -> ElementwiseKernel:
    if name not in NAMED_KERNELS:
        raise CalibrationError(f"unknown kernel {name!r}; known: {', '.join(NAMED_KERNELS)}")
    inputs, outputs, ops = NAMED_KERNELS[name]
    return elementwise_kernel(dtype, inputs, outputs, ops, name=name)


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        return list(csv.DictReader(path.open()))
    except OSError as e:
        raise CalibrationError(f"{path}: cannot read ({e.strerror})") from None


def read_csv(path: Path, kernel_name: str, soc: SocProfile, l2: L2State = SHIPPED_L2) -> list[Measured]:
    """Calibration-set CSV of one named kernel: shape as ``AxBxC``, dtype, and ``measured_device_us``;
    each row one launch at the model's default tiling."""
    out = []
    for i, row in enumerate(_rows(path), start=2):
        where = f"{path}:{i}"
        try:
            shape = tuple(int(x) for x in row["shape"].split("x"))
            us = float(row["measured_device_us"])
            kernel = named_kernel(kernel_name, row["dtype"])
            t = tile_kernel(kernel, shape, TilingParams(), soc)
        except (KeyError, ValueError, AttributeError, BadRequest) as e:
            raise CalibrationError(f"{where}: {e}") from None
        if not us > 0:
            raise CalibrationError(f"{where}: measured time must be positive")
        out.append(Measured(kernel_name, where, (t,), us, True, l2))
    return out


def _launch(spec: str, soc: SocProfile, where: str) -> TilingData:
    """``n:dtype:inputs:outputs:op+op+...`` (``-``: a copy, no vector op) as the model's default tiling."""
    try:
        n, dtype, inputs, outputs, ops = spec.split(":")
        names = [] if ops == "-" else ops.split("+")
        kernel = elementwise_kernel(dtype, int(inputs), int(outputs), names, name=ops)
        return tile_kernel(kernel, [int(n)], TilingParams(), soc)
    except (ValueError, BadRequest) as e:
        raise CalibrationError(f"{where}: kernel {spec!r}: {e}") from None


def read_readings(path: Path) -> dict[str, str]:
    """``kernel_readings.csv``: op, ops, source: an operator's instruction list read from the kernel its
    SoC runs, in place of the data file's reading (each row names its source)."""
    out: dict[str, str] = {}
    for i, row in enumerate(_rows(path), start=2):
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
    out = []
    for i, row in enumerate(_rows(path), start=2):
        where = f"{path.name}:{i}"
        try:
            us = float(row["measured_device_us"])
            specs = row["kernels"].split(";")
            if readings and row["op"] in readings:
                if len(specs) != 1:
                    raise ValueError(f"a reading of {row['op']!r} replaces one kernel's ops, not a composite's")
                specs = [":".join([*specs[0].split(":")[:4], readings[row["op"]]])]
            launches = tuple(_launch(spec, soc, where) for spec in specs)
            out.append(Measured(row["op"], where, launches, us, row["status"] == "primary", SHIPPED_L2))
        except (KeyError, ValueError) as e:
            raise CalibrationError(f"{where}: {e}") from None
    return out


def read_all(directory: Path, soc: SocProfile) -> list[Measured]:
    """The shipped measurements (``CALIBRATION_FILES`` in ``directory``)."""
    sigmoid, cannbench, readings = (directory / f for f in CALIBRATION_FILES)
    return read_csv(sigmoid, "sigmoid", soc) + read_cannbench(cannbench, soc, read_readings(readings))


def _record_tiling(rec: dict[str, Any], soc: SocProfile) -> tuple[str, TilingData]:
    spec = rec["kernel"]
    kind = spec.get("kind") if isinstance(spec, dict) else None
    shape = [int(d) for d in rec["shape"]]
    element_count(shape)
    params = params_from_dict(rec.get("params"))
    if kind == "bce_grad":
        variant = Variant(
            spec["dtype"],
            spec.get("reduction", "none"),
            spec.get("weight", True),
            spec.get("pos_weight", "none"),
            spec.get("wrt", "logit"),
        )
        return "bce_grad", compute_tiling(shape, variant, params, soc, "exact", rec.get("weight_period"))
    if kind == "elementwise":
        kernel = elementwise_kernel(spec["dtype"], spec["inputs"], spec["outputs"], spec["ops"], spec.get("scalars", 0))
        return "elementwise", tile_kernel(kernel, shape, params, soc)
    if kind in NAMED_KERNELS:
        return str(kind), tile_kernel(named_kernel(kind, spec["dtype"]), shape, params, soc)
    raise ValueError(f"kernel.kind must be bce_grad, elementwise or one of {', '.join(NAMED_KERNELS)}")


def record_documents(paths: Path | Sequence[Path]) -> list[tuple[str, dict[str, Any]]]:
    """Every record of ``paths`` as (``file:line``, its JSON object), file by file and line by line (blank
    lines skipped), less those a later record supersedes: one marked ``"again": true`` (a second look's race
    took further samples of a configuration its first race measured, ``tuner.study.look_again``) carries all
    of that configuration's samples and replaces the earlier record of the same ``key`` and ``params``, in
    any of the files. A line that is not a JSON object is a CalibrationError naming it."""
    docs: list[tuple[str, dict[str, Any]]] = []
    latest: dict[tuple[str, str], int] = {}  # (key, params) -> its record's index in docs
    for path in [paths] if isinstance(paths, Path) else paths:
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
            except json.JSONDecodeError as e:
                raise CalibrationError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise CalibrationError(f"{where}: TypeError: a record is a JSON object")
            same = (str(rec.get("key", "")), json.dumps(rec.get("params"), sort_keys=True))
            if rec.get("again") is True and same[0] and same in latest:
                docs[latest[same]] = ("", {})  # superseded: dropped below
            latest[same] = len(docs)
            docs.append((where, rec))
    return [(where, rec) for where, rec in docs if where]


def read_records(paths: Path | Sequence[Path], soc: SocProfile) -> list[Measured]:
    """Measurement records, one JSON object per line (``record_documents``): ``kernel`` (``kind``
    bce_grad with the variant's fields, elementwise, or a named kernel), ``shape``, ``params`` (the
    knobs), ``measured_us`` (the median), optional ``l2`` (default cold: the NPU backend flushes L2
    before every sample) and ``key``. A malformed line is a CalibrationError naming it."""
    return [record_case(where, rec, soc) for where, rec in record_documents(paths)]


def record_case(where: str, rec: dict[str, Any], soc: SocProfile) -> Measured:
    """One record (``where``: its file and line, for errors) as a calibration case."""
    try:
        op, t = _record_tiling(rec, soc)
        us = float(rec["measured_us"])
        l2 = L2_STATES[rec.get("l2", "cold")]
    except (KeyError, ValueError, TypeError, AttributeError, BadRequest) as e:
        raise CalibrationError(f"{where}: {type(e).__name__}: {e}") from None
    if not (us > 0 and math.isfinite(us)):
        raise CalibrationError(f"{where}: measured_us must be positive")
    return Measured(op, where, (t,), us, True, l2, str(rec.get("key", "")))


def read_data(
    paths: Sequence[Path], soc: SocProfile, kernel: str = "sigmoid", csv_l2: L2State = SHIPPED_L2
) -> list[Measured]:
    """Each path by its kind: a directory holding the shipped files, JSON lines (records), or a CSV of
    ``kernel``."""
    out: list[Measured] = []
    for path in paths:
        if path.is_dir():
            out += read_all(path, soc)
        elif path.suffix not in (".jsonl", ".json"):
            out += read_csv(path, kernel, soc, csv_l2)
    return out + read_records([p for p in paths if not p.is_dir() and p.suffix in (".jsonl", ".json")], soc)


@dataclass(frozen=True)
class Fitted:
    """Fitted values of profile fields (and of the DMA curves' scales), and the parameters asked for that
    the data cannot constrain (kept at the profile's value), each with why."""

    values: dict[str, float]
    not_fitted: dict[str, str] = field(default_factory=dict)
    #: each fitted value's standard error from the fit's curvature (Gauss-Newton: the residuals' variance
    #: times the inverse of J^T J at the solution); inf where the cases do not move the fit at all
    stderr: dict[str, float] = field(default_factory=dict)

    def uncertainty(self) -> dict[str, str]:
        """Each fitted value as value +- standard error, flagged where the data barely constrains it (the
        error at least half the value)."""
        out = {}
        for p, v in self.values.items():
            se = self.stderr.get(p, math.inf)
            weak = not math.isfinite(se) or se >= 0.5 * abs(v)
            out[p] = f"{v:g} +- {se:.3g}" + (" (weakly constrained by the data)" if weak else "")
        return out

    def apply(self, soc: SocProfile) -> SocProfile:
        values: dict[str, Any] = {k: v for k, v in self.values.items() if k not in CURVE_SCALES}
        for scale, curve in CURVE_SCALES.items():
            if scale in self.values:
                values[curve] = tuple((kib, round(us * self.values[scale], 4)) for kib, us in getattr(soc, curve))
        return replace(soc, **values)


def predicted_us(m: Measured, soc: SocProfile) -> float:
    return sum(predict(t, soc, m.l2) for t in m.launches)


class CaseScorer:
    """predicted / measured - 1 of each of ``cases`` under any profile (``errors``), their grouping built once:
    single launches of an exact-scheme kernel scored together per (kernel, size, L2 state), all sizes in one
    engine call (``engine.score_groups``). A fit evaluates the same cases under hundreds of profiles: building
    the groups each time had cost as much as the engine (900 cases over 60 sizes: 2.2 ms an evaluation), and one
    engine call per size more than the engine once the sizes are hundreds (900 cases over 481 keys)."""

    def __init__(self, cases: Sequence[Measured], l2: L2State | None = None) -> None:
        self.others: list[tuple[int, tuple[TilingData, ...], L2State]] = []  # scored launch by launch
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, m in enumerate(cases):
            state = m.l2 if l2 is None else l2
            t = m.launches[0]
            if len(m.launches) == 1 and t.scheme == "exact":
                groups.setdefault((id(t.kernel), t.n, state), []).append(i)
            else:
                self.others.append((i, m.launches, state))
        self.groups = [(cases[idx[0]].launches[0].kernel, n, state) for (_, n, state), idx in groups.items()]
        self.rows = np.array([i for idx in groups.values() for i in idx], dtype=np.int64)  # each row's case
        self.starts = np.cumsum([0] + [len(idx) for idx in groups.values()])
        self.knobs = [np.array([getattr(cases[i].launches[0].params, k) for i in self.rows], dtype=np.int64)
                      for k in KNOB_NAMES]  # fmt: skip
        self.measured = np.array([m.measured_us for m in cases])

    def __call__(self, soc: SocProfile) -> np.ndarray:
        pred = np.zeros(self.measured.size)
        for i, launches, state in self.others:
            pred[i] = sum(predict(x, soc, state) for x in launches)
        if self.groups:
            pred[self.rows] = engine.score_groups(soc, self.groups, self.starts, *self.knobs)
        out: np.ndarray = pred / self.measured - 1.0
        return out


def errors(cases: Sequence[Measured], soc: SocProfile, l2: L2State | None = None) -> np.ndarray:
    """predicted / measured - 1 of each case, in the L2 state it was measured in (or ``l2`` for all)
    (``CaseScorer``: a caller scoring the same cases again builds one)."""
    return CaseScorer(cases, l2)(soc)


def _start(soc: SocProfile) -> dict[str, float]:
    return {
        "launch_us": 2.0,
        "core_start_us": 0.3,
        "hbm_gbps": soc.hbm_peak_gbps,
        "l2_gbps": soc.l2_peak_gbps / 2,
        "l2_half_bytes": soc.l2_bytes / 2,
        "l2_falloff": 2.0,
        "vector_cycle_scale": 1.5,
        "vector_start_cycles": soc.vector_start_cycles,
        "mte2_scale": 1.0,
        "mte3_scale": 1.0,
    }


def fit(
    cases: Sequence[Measured],
    soc: SocProfile,
    free: tuple[str, ...] = PARAMS,
    f_scale: float = F_SCALE,
    start: SocProfile | None = None,
    loss: str = LOSS,
) -> Fitted:
    """Robust least squares on log(predicted / measured) over ``cases`` (primary ones only), ``free``
    within their bounds; ``start``: where to start (default: fixed starting values, so a fit does not
    depend on the profile it refits); ``loss``: SciPy's (``linear`` for plain least squares)."""
    data = [m for m in cases if m.primary]
    if not data:
        raise CalibrationError("no primary measurements to fit")
    unknown = [p for p in free if p not in BOUNDS]
    if unknown:
        raise CalibrationError(f"cannot fit {', '.join(unknown)}; free parameters: {', '.join(BOUNDS)}")
    not_fitted = {p: why for p in free if (why := unconstrained(p, data))}
    free = tuple(p for p in free if p not in not_fitted)
    if not free:
        return Fitted({}, not_fitted)
    peaks = {"hbm_gbps": soc.hbm_peak_gbps, "l2_gbps": soc.l2_peak_gbps, "l2_half_bytes": 2.0 * soc.l2_bytes}
    floors = {"hbm_gbps": HBM_FLOOR * soc.hbm_peak_gbps}
    lo = np.array([max(BOUNDS[p][0], floors.get(p, -np.inf)) for p in free])
    hi = np.array([min(BOUNDS[p][1], peaks.get(p, np.inf)) for p in free])
    lo = np.where(lo < hi, lo, hi / 2)  # a small L2 (310B1: 4 MiB) caps the half point below its usual floor
    begin = _start(soc)
    if start is not None:
        begin |= {p: float(getattr(start, p)) for p in free if p not in CURVE_SCALES}
    x0 = np.clip([begin[p] for p in free], lo, hi)
    scale = np.maximum(np.abs(x0), 1e-3)  # fit in units of the start: MiB and GB/s on one footing

    scorer = CaseScorer(data)

    def residual(u: np.ndarray) -> np.ndarray:
        fitted = Fitted(dict(zip(free, map(float, u * scale), strict=True)))
        logs: np.ndarray = np.log1p(scorer(fitted.apply(soc)))
        return logs

    result = least_squares(
        residual, x0 / scale, bounds=(lo / scale, hi / scale), diff_step=1e-3, max_nfev=MAX_NFEV, loss=loss,
        f_scale=f_scale,
    )  # fmt: skip
    values = {p: round_value(p, float(v)) for p, v in zip(free, result.x * scale, strict=True)}
    return Fitted(values, not_fitted, _stderr(result.jac, result.fun, free, scale))


def _stderr(jac: np.ndarray, fun: np.ndarray, free: tuple[str, ...], scale: np.ndarray) -> dict[str, float]:
    """Standard errors of the fitted values from the Jacobian of the (log) residuals at the solution."""
    n, k = jac.shape
    variance = float(fun @ fun) / max(n - k, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cov = np.linalg.pinv(jac.T @ jac) * variance
    out = {}
    for i, p in enumerate(free):
        moves = bool(np.any(np.abs(jac[:, i]) > 1e-12))
        out[p] = float(np.sqrt(max(cov[i, i], 0.0)) * scale[i]) if moves else math.inf
    return out


def unconstrained(param: str, cases: Sequence[Measured]) -> str | None:
    """Why the cases cannot constrain ``param`` (None: they can): the L2 bandwidth enters only where some
    traffic hits L2 (a warm or steady state), the SoC's steady-state curve only in the steady state."""
    states = [m.l2 for m in cases]
    if param == "l2_gbps" and all(s is False for s in states):
        return "every case was measured with L2 cold: nothing hits L2"
    if param in ("l2_half_bytes", "l2_falloff") and not any(isinstance(s, str) and s == "steady" for s in states):
        return "no case was measured in the steady L2 state its curve describes"
    return None


def round_value(param: str, value: float) -> float:
    """A fitted value as profiles hold it (whole bytes for the L2 half point, 4 decimals otherwise)."""
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


#: The interval a prediction carries: the 10th and 90th percentiles of held-out measured / predicted.
INTERVAL_QUANTILES = (10.0, 90.0)
#: Fewer held-out cases than this in a traffic class: the class has no band of its own (the reader
#: falls back to the overall band and says so).
INTERVAL_MIN_CASES = 8
#: A device fit's band needs held-out cases of at least this many keys: one key's errors move together.
INTERVAL_MIN_KEYS = 3


def _ratio_band(ratio: np.ndarray) -> list[float]:
    lo, hi = np.percentile(ratio, INTERVAL_QUANTILES)
    return [round(float(lo), 4), round(float(hi), 4)]


def intervals(cases: Sequence[Measured], held_out: np.ndarray) -> dict[str, list[float]]:
    """Per traffic class with enough held-out cases (and ``all``), the range of measured / predicted that
    held-out cases fell in (``INTERVAL_QUANTILES``): a prediction p is expected within [p * lo, p * hi]
    that often. A class with fewer cases has no entry (``tiling_model.confidence`` says so)."""
    ratio = 1.0 / (1.0 + np.asarray(held_out, dtype=float))  # measured / predicted
    primary = np.array([m.primary for m in cases])
    traffic = np.array([m.traffic_bytes for m in cases])
    out = {"all": _ratio_band(ratio[primary])}
    for name, lo, hi in TRAFFIC_CLASSES:
        mask = primary & (traffic >= lo) & (traffic < hi)
        if mask.sum() >= INTERVAL_MIN_CASES:
            out[name] = _ratio_band(ratio[mask])
    return out


def device_intervals(
    cases: Sequence[Measured], held_out: np.ndarray | None
) -> tuple[dict[str, list[float]], dict[str, int], dict[str, list[float]]]:
    """``intervals`` of a device fit's held-out cases where the class holds ``INTERVAL_MIN_KEYS`` keys or
    more, and each class's key count (0: none; the reader falls back to a wider band and says why); then the
    held-out range of each class with fewer keys but some: too few for a band of its own, but cases of the
    class the fallback joins with the overall band (``tiling_model.confidence``)."""
    if held_out is None:
        return {}, {}, {}
    ratio = 1.0 / (1.0 + np.asarray(held_out, dtype=float))
    keys = np.array([m.key for m in cases])
    traffic = np.array([m.traffic_bytes for m in cases])
    finite = np.isfinite(ratio)
    bands: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    few: dict[str, list[float]] = {}
    for name, lo, hi in (("all", 0.0, math.inf), *TRAFFIC_CLASSES):
        mask = finite & (traffic >= lo) & (traffic < hi)
        counts[name] = len(set(keys[mask]))
        if counts[name] >= INTERVAL_MIN_KEYS:
            bands[name] = _ratio_band(ratio[mask])
        elif counts[name] > 0:
            few[name] = _ratio_band(ratio[mask])
    return bands, counts, few


@dataclass(frozen=True)
class CalibrationResult:
    """A fit and how well it predicts its data (in sample)."""

    profile: SocProfile
    fitted: Fitted
    before: np.ndarray  # errors with the starting profile
    after: np.ndarray
    cases: list[Measured]

    def as_dict(self) -> dict[str, Any]:
        return {
            "fitted": self.fitted.values,
            "fitted_uncertainty": self.fitted.uncertainty(),
            **({"not_fitted": self.fitted.not_fitted} if self.fitted.not_fitted else {}),
            "cases": len(self.cases),
            "median_abs_rel_error_before": round(float(np.median(np.abs(self.before))), 4),
            "median": round(float(np.median(np.abs(self.after))), 4),
            "worst": round(float(np.max(np.abs(self.after))), 4),
            "report": report(self.cases, self.after),
            "residuals": [
                {
                    "case": m.source,
                    "op": m.op,
                    "measured_us": m.measured_us,
                    "predicted_us": round(m.measured_us * (1 + e), 4),
                    "rel_error": round(float(e), 4),
                }
                for m, e in zip(self.cases, self.after, strict=True)
            ],
        }


def calibrate(
    soc: SocProfile, cases: Sequence[Measured], free: tuple[str, ...] = PARAMS, f_scale: float = F_SCALE
) -> CalibrationResult:
    """``fit`` of ``free`` to ``cases``, as a refitted profile and its errors before and after."""
    if not cases:
        raise CalibrationError("no measurements to calibrate against")
    fitted = fit(cases, soc, free, f_scale)
    profile = rehashed(fitted.apply(soc))
    return CalibrationResult(profile, fitted, errors(cases, soc), errors(cases, profile), list(cases))


@dataclass(frozen=True)
class DeviceFit:
    """What a device's records of bcetune's kernel say: the refitted profile (hardware parameters and
    knob correction), its errors, and the errors of the same fit on keys it was not fitted on."""

    profile: SocProfile
    fitted: Fitted
    correction: KnobCorrection  # as fitted; the profile carries it only where the residual is none
    before: np.ndarray
    after: np.ndarray
    held_out: np.ndarray | None  # by folds of keys: sizes the fit did not see (None: too few keys)
    cases: list[Measured] = field(repr=False)
    held_out_variants: np.ndarray | None = None  # by folds of variants: variants it did not see
    residual: Residual = NO_RESIDUAL  # in the correction's place (IDENTITY then: tiling_model.residual)

    def summary(self) -> dict[str, Any]:
        """The fit in numbers, with the bands answers carry (``tiling_model.confidence``): ``intervals`` from
        the cases held out by key (a variant the sweep measured, at a size it did not time),
        ``intervals_unmeasured`` from those held out by variant (a variant it never measured), each
        class's key count, the held-out range of a class with too few keys for a band (``intervals_few_keys``:
        what its fallback joins), the variants measured, and the in-sample band (what a fit too small for
        folds widens the shipped band by)."""
        out: dict[str, Any] = {
            "cases": len(self.cases),
            "keys": len({m.key for m in self.cases}),
            "fitted": self.fitted.values,
            "fitted_uncertainty": self.fitted.uncertainty(),
            **({"not_fitted": self.fitted.not_fitted} if self.fitted.not_fitted else {}),
            "knob_correction": self.profile.knob_correction.summary(),
            "residual": self.residual.summary(),
            "median_before": round(float(np.median(np.abs(self.before))), 4),
            "median": round(float(np.median(np.abs(self.after))), 4),
            "in_sample_band": _ratio_band(1.0 / (1.0 + np.asarray(self.after, dtype=float))),
            "measured_variants": sorted({m.launches[0].variant.label() for m in self.cases}),
        }
        measured, measured_keys, measured_few = device_intervals(self.cases, self.held_out)
        unmeasured, unmeasured_keys, unmeasured_few = device_intervals(self.cases, self.held_out_variants)
        if self.held_out is not None:
            out["held_out_median"] = round(float(np.median(np.abs(self.held_out))), 4)
        if self.held_out_variants is not None:
            out["held_out_variants_median"] = round(float(np.median(np.abs(self.held_out_variants))), 4)
        out["intervals"] = measured
        out["intervals_unmeasured"] = unmeasured
        out["interval_keys"] = {"measured": measured_keys, "unmeasured": unmeasured_keys}
        out["intervals_few_keys"] = {"measured": measured_few, "unmeasured": unmeasured_few}
        return out


FOLDS = 5
#: Rounds of the device fit: the hardware parameters with the correction so far, then the correction
#: on what they leave (a knob effect left in the data bends the hardware fit; a round or two settles it).
ROUNDS = 3


def spread_over_keys(cases: Sequence[Measured], cap: int | None) -> list[Measured]:
    """At most ``cap`` cases (None: all), spread evenly over the keys (each key's first ones kept)."""
    if cap is None or len(cases) <= cap:
        return list(cases)
    by_key: dict[str, list[Measured]] = {}
    for m in cases:
        by_key.setdefault(m.key, []).append(m)
    per = max(cap // len(by_key), 1)
    return [m for group in by_key.values() for m in group[:per]][:cap]


def _is_ours(m: Measured) -> bool:
    return len(m.launches) == 1 and m.launches[0].kernel.knob_corrected


def _fit_device(
    cases: Sequence[Measured], soc: SocProfile, free: tuple[str, ...], cap: int | None = None
) -> tuple[Fitted, KnobCorrection, Residual]:
    """The hardware parameters with the knob correction (on at most ``cap`` cases, spread over the keys: the
    robust fit's cost grows with them), then the residual on every case of bcetune's kernel."""
    base = replace(soc, knob_correction=IDENTITY, residual=NO_RESIDUAL)
    some = spread_over_keys(cases, cap)
    configs = [_knobs(m.launches[0]) for m in some]
    ours = [i for i, m in enumerate(some) if _is_ours(m)]
    correction, start = IDENTITY, base
    fitted = Fitted({})
    for _ in range(ROUNDS):
        fitted = fit(some, replace(base, knob_correction=correction), free, start=start)
        hardware = fitted.apply(base)
        logs = -np.log1p(errors([some[i] for i in ours], hardware))  # log(measured / predicted)
        correction = fit_correction([configs[i] for i in ours], [float(x) for x in logs], [some[i].key for i in ours])
        start = hardware
    # The residual in place of the correction where held-out keys say it ranks them better than the hardware
    # alone: its classes hold the correction's (block, buffers, alignment, cores) and what the knobs make of a
    # size (benchmarks/untimed_sizes.py: in place beat on top on every stand-in device).
    hardware = fitted.apply(base)
    mine = [m for m in cases if _is_ours(m)]
    residual = device_residual(mine, hardware)
    if not residual.identity:  # its fit ranks within keys; the level across them (the correction's) is set here
        level = float(np.median(-np.log1p(errors(mine, replace(hardware, residual=residual)))))
        residual = residual.scaled(level)
    return fitted, correction, residual


def _device_profile(soc: SocProfile, fitted: Fitted, correction: KnobCorrection, residual: Residual) -> SocProfile:
    """The fitted hardware with the residual, or with the knob correction where there is none."""
    return replace(fitted.apply(soc), knob_correction=correction if residual.identity else IDENTITY, residual=residual)


def device_residual(cases: Sequence[Measured], base: SocProfile) -> Residual:
    """The learned residual over the realised tiling (``tiling_model.residual``) of measurements of bcetune's
    kernel on what ``base`` predicts (the hardware fit and its knob correction): each size's configurations'
    levels in one engine call; none where held-out keys say it does not help."""
    if not cases:
        return NO_RESIDUAL
    logs = -np.log1p(errors(cases, base))  # log(measured / predicted)
    return fit_residual(case_levels(cases), [m.key for m in cases], logs)


def case_levels(cases: Sequence[Measured]) -> np.ndarray:
    """(len(cases), features) residual level of each measured configuration of bcetune's kernel (its first
    launch's): each size's configurations in one engine call."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, m in enumerate(cases):
        groups.setdefault((id(m.launches[0].kernel), m.launches[0].n), []).append(i)
    lv = np.zeros((len(cases), len(RESIDUAL_FEATURES)), dtype=np.int64)
    for idx in groups.values():
        t0 = cases[idx[0]].launches[0]
        cols = [np.array([getattr(cases[i].launches[0].params, k) for i in idx]) for k in KNOB_NAMES]
        lv[idx] = residual_levels(t0.n, t0.elem_bytes, *cols)
    return lv


def _knobs(t: TilingData) -> tuple[int, int, int, int]:
    p = t.params
    return (int(p.block_bytes or 0), int(p.buffer_num or 0), int(p.tile_bytes or 0), t.block_dim)


def fit_device(
    cases: Sequence[Measured],
    soc: SocProfile,
    free: tuple[str, ...] = DEVICE_PARAMS,
    folds: int = FOLDS,
    hardware_cap: int | None = None,
) -> DeviceFit:
    """Refit ``soc`` to a device's measurements: ``free`` hardware parameters (robust ``fit``) with the knob
    correction on the log residuals they leave (ridge towards 1), then the residual over the realised tiling
    (``tiling_model.residual``) in the correction's place where it ranks held-out keys better. The same fit is
    cross-validated by up to ``folds`` folds of keys (each key's cases predicted by a fit without them; from
    ``INTERVAL_MIN_KEYS`` keys) and of variants (from two; 0: no folds): the held-out errors give the
    intervals a prediction carries, for a variant the sweep measured and for one it did not. ``hardware_cap``:
    the hardware fit takes at most that many cases, spread over the keys; the residual takes every one."""
    if not cases:
        raise CalibrationError("no measurements to fit a device to")
    fitted, correction, residual = _fit_device(cases, soc, free, hardware_cap)
    profile = rehashed(_device_profile(soc, fitted, correction, residual))
    keys = sorted({m.key for m in cases})
    variants = sorted({m.launches[0].variant.label() for m in cases})
    held = held_variants = None
    if folds > 0 and len(keys) >= INTERVAL_MIN_KEYS:
        held = _held_out(cases, soc, free, [m.key for m in cases], keys, folds, hardware_cap)
    if folds > 0 and len(variants) >= 2:
        labels = [m.launches[0].variant.label() for m in cases]
        held_variants = _held_out(cases, soc, free, labels, variants, folds, hardware_cap)
    return DeviceFit(
        profile,
        fitted,
        correction,
        errors(cases, soc),
        errors(cases, profile),
        held,
        list(cases),
        held_variants,
        residual,
    )


def _held_out(
    cases: Sequence[Measured],
    soc: SocProfile,
    free: tuple[str, ...],
    group: list[str],
    groups: list[str],
    folds: int,
    cap: int | None = None,
) -> np.ndarray:
    """Each case predicted by the two-step fit on the other folds' cases: ``min(folds, len(groups))`` folds
    of whole groups (keys: sizes not seen; variants: variants not seen)."""
    k = min(folds, len(groups))
    held = np.zeros(len(cases))
    for f in range(k):
        out = set(groups[f::k])
        train = [m for m, g in zip(cases, group, strict=True) if g not in out]
        idx = [i for i, g in enumerate(group) if g in out]
        fold_fit, fold_corr, fold_res = _fit_device(train, soc, free, cap)
        held[idx] = errors([cases[i] for i in idx], _device_profile(soc, fold_fit, fold_corr, fold_res))
    return held

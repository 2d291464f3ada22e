"""The cost model against measured operators it was not fitted on: leave-one-operator-out.

The calibration data (``data/calibration``: Sigmoid and six more CANN-Bench operators on the
Ascend910B2) are read as elementwise launches (a composite reference is the sum of its kernels, each
its own launch). Per-SoC hardware parameters only are fitted (launch, core start, HBM and L2
bandwidth, and the steady-state L2 curve), never a per-operator constant; each operator is predicted
by a fit on all the others, and the errors are reported per operator and per traffic class.
``calibrate_all`` is the shipped calibration (the fit on every operator, which ``python -m
tiling_model calibrate --write`` puts into the profiles, and its held-out errors). The fit itself is
``model_tools.calibrate.fit``, the one calibration path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from model_tools.calibrate import (
    CALIBRATION_FILES,
    F_SCALE,
    HBM_FLOOR,
    LOSS,
    PARAMS,
    Fitted,
    Measured,
    errors,
    fit,
    intervals,
    read_all,
    report,
    round_value,
)
from tiling_model.soc import SocProfile

__all__ = [
    "CALIBRATION_FILES",
    "HBM_FLOOR",
    "PARAMS",
    "Calibration",
    "calibrate_all",
    "derived_values",
    "in_sample_ceiling",
    "leave_one_operator_out",
    "loss_scale_study",
    "profile_document",
    "read_all",
    "report",
]


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
        out[p] = round_value(p, v)
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
        f"fitted by `python -m model_tools calibrate --write` on {', '.join(summary['data'])} "
        f"({summary['cases']} primary cases of {summary['operators']} operators; "
        f"in-sample median |error| {100 * summary['median']:.1f}%, "
        f"leave-one-operator-out {100 * summary['loo_median']:.1f}%)"
    )
    doc["vector_cycle_scale"] = 1.0
    doc["sources"]["vector_cycle_scale"] = (
        "1: MSKPP's measured issue rates as they are (data/mskpp_vector_instr_910b1.csv); not fitted by default "
        "(model_tools.calibrate.OPTIONAL_PARAMS says why)"
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
            out["intervals"] = intervals(self.cases, self.held_out)
        return out

    def profile_texts(self, data: list[str]) -> dict[str, str]:
        """Every known SoC's profile file as `calibrate --write` writes it (this SoC's fitted values, the others'
        derived), by SoC name: what tiling_model/socs must hold, byte for byte."""
        from tiling_model.soc import known_socs, load_soc

        summary = self.summary(data)
        return {
            name: json.dumps(profile_document(load_soc(name), self.measured, self.fitted, summary), indent=2) + "\n"
            for name in known_socs()
        }


def calibrate_all(directory: Path, soc: SocProfile, loo: bool = True) -> Calibration:
    """Fit ``PARAMS`` on every calibration case (``vector_cycle_scale`` at MSKPP's rates, 1), and
    cross-validate the same fit leaving each operator out."""
    base = replace(soc, vector_cycle_scale=1.0)
    cases = read_all(directory, base)
    fitted = fit(cases, base)
    in_sample = errors(cases, fitted.apply(base))
    held_out, folds = leave_one_operator_out(cases, base) if loo else (None, {})
    return Calibration(base, cases, fitted, in_sample, held_out, folds)


#: The in-sample ceiling's fits: the shipped loss and scale, then plain least squares (no case an outlier).
CEILING_LOSSES = ((LOSS, F_SCALE), ("linear", 1.0))
#: Parameters freed beyond the shipped ones: the rest of a device fit's (DEVICE_PARAMS; the vector factor stays at
#: MSKPP's rates), in this order (the robust fit is not convex: another order lands on another optimum).
CEILING_EXTRA = ("vector_start_cycles", "mte2_scale", "mte3_scale")


def in_sample_ceiling(directory: Path, soc: SocProfile) -> list[dict[str, Any]]:
    """What the model's per-SoC parameters can do at best on the calibration cases: fitted on every operator
    and scored on the same cases (in sample), the shipped parameters free and then more, under the shipped
    robust loss and under plain least squares. An error no fit reaches in sample is out of reach held out:
    what is left is the operators' own (their kernels' fixed costs), not the hardware's."""
    base = replace(soc, vector_cycle_scale=1.0)
    cases = read_all(directory, base)
    primary = np.array([m.primary for m in cases])
    out = []
    for loss, f_scale in CEILING_LOSSES:
        for name, free in (("shipped", PARAMS), ("more", (*PARAMS, *CEILING_EXTRA))):
            fitted = fit(cases, base, free=free, f_scale=f_scale, loss=loss)
            e = np.abs(errors(cases, fitted.apply(base)))[primary]
            out.append({"loss": loss, "free": name, "median": float(np.median(e)),
                        "p90": float(np.percentile(e, 90)), "fitted": fitted.values})  # fmt: skip
    return out

"""Leave-one-operator-out cross-validation of the cost model on the calibration data inside the repo."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tiling_model import crossval as cv
from tiling_model import load_soc
from tiling_model.calibrate import CalibrationError
from tiling_model.simulate import SteadyL2

DATA = Path(__file__).resolve().parents[1] / "data" / "calibration"
SOC = load_soc("Ascend910B2")


def test_the_calibration_data_reads_as_elementwise_launches() -> None:
    cases = cv.read_all(DATA, SOC)
    assert len(cases) == 138 and sum(m.primary for m in cases) == 120
    assert {m.op for m in cases} == {"sigmoid", "exp", "gelu", "mish", "swi_glu", "apply_adam_w", "masked_scale"}
    composite = [m for m in cases if len(m.launches) > 1]
    assert composite and all(m.traffic_bytes > 0 for m in cases)
    adam = next(m for m in cases if m.op == "apply_adam_w")
    assert adam.launches[0].kernel.streams == 7  # 4 inputs, 3 outputs


def test_a_bad_kernel_reading_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "c.csv"
    bad.write_text(
        "op,case,shape,dtype,measured_device_us,status,kernels\nx,1,4,float16,3.0,primary,4:float16:1:1:frobnicate\n"
    )
    with pytest.raises(CalibrationError, match=r"c.csv:2: kernel .*frobnicate"):
        cv.read_cannbench(bad, SOC)


def test_each_fold_is_fitted_without_the_operator_it_predicts(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [m for m in cv.read_all(DATA, SOC) if m.op in ("sigmoid", "gelu", "exp")]
    seen: dict[str, set[str]] = {}

    def fake_fit(train: list[cv.Measured], soc: object) -> cv.Fitted:
        ops = {m.op for m in train}
        seen[next(op for op in ("sigmoid", "gelu", "exp") if op not in ops)] = ops
        return cv.Fitted({"launch_us": 3.0})

    monkeypatch.setattr(cv, "fit", fake_fit)
    errs, fits = cv.leave_one_operator_out(cases, SOC)
    assert set(fits) == {"sigmoid", "gelu", "exp"} and all(op not in ops for op, ops in seen.items())
    assert errs.shape == (len(cases),) and np.isfinite(errs).all()


def test_a_fit_recovers_from_a_wrong_profile() -> None:
    cases = [m for m in cv.read_all(DATA, SOC) if m.op == "sigmoid"]
    wrong = replace(SOC, hbm_gbps=SOC.hbm_gbps / 3, launch_us=12.0)
    before = np.median(np.abs(cv.errors(cases, wrong, False)))
    fitted = cv.fit(cases, wrong, ("launch_us", "hbm_gbps", "l2_gbps", "l2_half_mib", "l2_falloff"))
    profile, l2 = fitted.apply(wrong)
    after = np.median(np.abs(cv.errors(cases, profile, l2)))
    assert after < before / 3 and after < 0.15
    assert fitted.values["hbm_gbps"] <= SOC.hbm_peak_gbps and fitted.values["l2_gbps"] <= SOC.l2_peak_gbps


def test_the_steady_l2_share_falls_with_the_footprint() -> None:
    l2 = SteadyL2(half_bytes=64 * 2**20, falloff=3.0)
    hits = l2.hit(np.array([1e6, 64 * 2**20, 1e9]))
    assert hits[0] > 0.99 and abs(hits[1] - 0.5) < 1e-12 and hits[2] < 0.01

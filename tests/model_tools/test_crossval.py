"""Leave-one-operator-out cross-validation of the cost model on the calibration data inside the repo."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from model_tools import calibrate as cal
from model_tools import crossval as cv
from model_tools.calibrate import CalibrationError
from tiling_model import load_soc
from tiling_model.model_types import SteadyL2

DATA = Path(__file__).resolve().parents[2] / "data" / "calibration"
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
        cal.read_cannbench(bad, SOC)


def test_each_fold_is_fitted_without_the_operator_it_predicts(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [m for m in cv.read_all(DATA, SOC) if m.op in ("sigmoid", "gelu", "exp")]
    seen: dict[str, set[str]] = {}

    def fake_fit(train: list[cal.Measured], soc: object, f_scale: float = cal.F_SCALE) -> cal.Fitted:
        ops = {m.op for m in train}
        seen[next(op for op in ("sigmoid", "gelu", "exp") if op not in ops)] = ops
        return cal.Fitted({"launch_us": 3.0})

    monkeypatch.setattr(cv, "fit", fake_fit)
    errs, fits = cv.leave_one_operator_out(cases, SOC)
    assert set(fits) == {"sigmoid", "gelu", "exp"} and all(op not in ops for op, ops in seen.items())
    assert errs.shape == (len(cases),) and np.isfinite(errs).all()


def test_a_fit_recovers_from_a_wrong_profile() -> None:
    cases = [m for m in cv.read_all(DATA, SOC) if m.op == "sigmoid"]
    wrong = replace(SOC, hbm_gbps=SOC.hbm_gbps / 3, launch_us=12.0, l2_falloff=0.6)
    before = np.median(np.abs(cal.errors(cases, wrong)))
    fitted = cal.fit(cases, wrong)
    after = np.median(np.abs(cal.errors(cases, fitted.apply(wrong))))
    assert after < before / 3 and after < 0.15
    assert fitted.values["hbm_gbps"] <= SOC.hbm_peak_gbps and fitted.values["l2_gbps"] <= SOC.l2_peak_gbps
    assert fitted.values["l2_half_bytes"] <= 2 * SOC.l2_bytes
    assert fitted.values["hbm_gbps"] >= cal.HBM_FLOOR * SOC.hbm_peak_gbps


def test_a_parameter_that_is_no_profile_field_is_refused() -> None:
    cases = [m for m in cv.read_all(DATA, SOC) if m.op == "sigmoid"]
    with pytest.raises(CalibrationError, match="cannot fit l2_half_mib"):
        cal.fit(cases, SOC, ("launch_us", "l2_half_mib"))


def test_the_steady_l2_share_falls_with_the_footprint() -> None:
    l2 = SteadyL2(half_bytes=64 * 2**20, falloff=3.0, l2_bytes=192 * 2**20)
    hits = l2.hit(np.array([1e6, 64 * 2**20, 1e9]))
    assert hits[0] > 0.99 and abs(hits[1] - 0.5) < 1e-12 and hits[2] < 0.01


def test_the_steady_l2_share_never_passes_what_the_l2_holds() -> None:
    """A half point past the L2 size (the fit may put it there) still hits no more than l2_bytes / F."""
    c = 192 * 2**20
    l2 = SteadyL2(half_bytes=1.8 * c, falloff=8.0, l2_bytes=c)
    f = np.array([0.5 * c, c, 1.2 * c, 1.8 * c, 3 * c])
    hits = l2.hit(f)
    assert hits[0] == pytest.approx(1.0, abs=1e-3) and hits[1] > 0.9
    assert (hits <= np.minimum(1.0, c / f) + 1e-15).all() and hits[2] == pytest.approx(c / f[2])
    assert hits[3] == pytest.approx(0.5) and hits[4] < 0.02


def test_the_kernel_readings_replace_the_instruction_lists_they_name(tmp_path: Path) -> None:
    cases = cv.read_all(DATA, SOC)
    readings = cal.read_readings(DATA / "kernel_readings.csv")
    mish = next(m for m in cases if m.op == "mish")
    assert [op.name for op in mish.launches[0].kernel.ops if op.name not in ("cast", "cast_f32_f16")] == readings[
        "mish"
    ].split("+")
    assert mish.launches[0].kernel.ops[0].name == "cast"  # float16: widened as the TBE kernel does
    bad = tmp_path / "r.csv"
    bad.write_text("op,ops,source\nmish,exp+frobnicate,somewhere\n")
    with pytest.raises(CalibrationError, match=r"r.csv:2: unknown op\(s\) frobnicate"):
        cal.read_readings(bad)
    bad.write_text("op,ops,source\nmish,exp,\n")
    with pytest.raises(CalibrationError, match=r"r.csv:2: needs op, ops and source"):
        cal.read_readings(bad)
    composite = tmp_path / "c.csv"
    composite.write_text(
        "op,case,shape,dtype,measured_device_us,status,kernels\n"
        "exp,1,4,float32,3.0,primary,4:float32:1:1:mul;4:float32:1:1:exp\n"
    )
    with pytest.raises(CalibrationError, match=r"c.csv:2: .*not a composite"):
        cal.read_cannbench(composite, SOC, {"exp": "exp"})


def test_the_shipped_profile_is_the_fit_on_the_shipped_data() -> None:
    """tiling_model/socs/Ascend910B2.json holds what `calibrate --write` fits on data/calibration (no LOO
    here: the same fit, the same numbers), and its in-sample median is the one it records."""
    cal = cv.calibrate_all(DATA, SOC, loo=False)
    assert cal.fitted.values == pytest.approx(SOC.calibration["fitted"], rel=1e-3)  # type: ignore[index]
    for p, v in SOC.calibration["fitted"].items():  # type: ignore[index]
        assert getattr(SOC, p) == v
    assert SOC.vector_cycle_scale == 1.0
    median = cv.report(cal.cases, cal.in_sample)["overall"]["median"]
    assert median == pytest.approx(SOC.calibration["median"], abs=2e-3)  # type: ignore[index]
    assert SOC.calibration["loo_median"] >= median  # type: ignore[index]


def test_other_socs_carry_the_fit_by_their_peaks_and_l2_size() -> None:
    fitted = cal.Fitted(dict(SOC.calibration["fitted"]))  # type: ignore[index]
    for name in ("Ascend910B1", "Ascend910B3", "Ascend910B4", "Ascend310B1"):
        other = load_soc(name)
        assert other.launch_us == fitted.values["launch_us"]
        assert other.hbm_gbps == pytest.approx(
            min(fitted.values["hbm_gbps"] * other.hbm_peak_gbps / SOC.hbm_peak_gbps, other.hbm_peak_gbps), abs=1e-3
        )
        assert other.l2_half_bytes == pytest.approx(
            fitted.values["l2_half_bytes"] * other.l2_bytes / SOC.l2_bytes, abs=1
        )
        assert other.hbm_gbps <= other.hbm_peak_gbps and other.l2_gbps <= other.l2_peak_gbps
        assert "EST" in other.sources["hbm_gbps"] and other.calibration["measured_on"] == SOC.name  # type: ignore[index]


def test_the_default_l2_state_is_cold_and_the_calibration_data_is_read_in_its_own() -> None:
    """bcetune predicts and tunes for cold L2 (in training the kernel's inputs were written long before),
    while CANN-Bench repeated its launches: its cases are fitted and predicted in the steady state."""
    from tiling_model.cost import predict
    from tiling_model.model_types import DEFAULT_L2
    from tiling_model.tiling import compute_tiling
    from tiling_model.variant import Variant

    assert DEFAULT_L2 is False
    for n in (1 << 16, 1 << 22, 1 << 26, 1 << 29):
        t = compute_tiling([n], Variant("float32", "none"))
        curve = SteadyL2(SOC.l2_half_bytes, SOC.l2_falloff, SOC.l2_bytes)
        assert predict(t) == predict(t, SOC, False) >= predict(t, SOC, curve) >= predict(t, SOC, True)
    cases = cv.read_all(DATA, SOC)
    assert {m.l2 for m in cases} == {"steady"}
    assert np.array_equal(cal.errors(cases, SOC), cal.errors(cases, SOC, "steady"))


def test_the_scatter_plot_is_drawn(tmp_path: Path) -> None:
    from model_tools.calibration_plot import calibration_scatter

    cases = cv.read_all(DATA, SOC)
    out = tmp_path / "s.png"
    calibration_scatter(cases, cal.errors(cases, SOC), out, "in sample")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000


def test_a_soc_with_a_small_l2_fits_within_its_l2() -> None:
    """The 310B1's 4 MiB L2 is below the half point's usual floor: the bounds follow the L2."""
    small = load_soc("Ascend310B1")
    cases = [m for m in cv.read_all(DATA, small) if m.op == "sigmoid"][:4]
    fitted = cal.fit(cases, small, ("launch_us", "l2_half_bytes"))
    assert 0 < fitted.values["l2_half_bytes"] <= 2 * small.l2_bytes


def test_the_loss_scale_study_never_lets_the_held_out_operator_choose(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Nested: each outer fold picks its scale by folds of its own training operators only."""
    three = ("sigmoid", "gelu", "exp")
    cases = [m for m in cv.read_all(DATA, SOC) if m.op in three]
    monkeypatch.setattr(cv, "read_all", lambda directory, soc: cases)
    trained_on: list[tuple[frozenset[str], float]] = []

    def fake_fit(train: list[cal.Measured], soc: object, free: object = None, f_scale: float = 0.1) -> cal.Fitted:
        trained_on.append((frozenset(m.op for m in train), f_scale))
        return cal.Fitted({"launch_us": 3.0 + 10 * f_scale})  # a larger scale: a slower, worse model

    monkeypatch.setattr(cv, "fit", fake_fit)
    study = cv.loss_scale_study(tmp_path, SOC, scales=(0.1, 0.3))
    assert set(study["fixed"]) == {"0.1", "0.3"} and study["fixed"]["0.1"] != study["fixed"]["0.3"]
    assert set(study["chosen"]) == set(three) and 0 < study["nested"] < 10
    assert all(f == 0.1 for f in study["chosen"].values())  # the inner folds prefer the better scale
    singles = [ops for ops, _ in trained_on if len(ops) == 1]  # inner folds: one training operator each
    assert len(singles) == 3 * 2 * 2  # 3 outer folds x 2 scales x 2 inner folds
    assert all(len(ops) < 3 for ops, _ in trained_on)  # no fit ever saw all three operators


def test_the_in_sample_ceiling_starts_from_the_shipped_fit_and_frees_more() -> None:
    """Its first row is the shipped calibration scored in sample (the same fit, the same cases); freeing more
    parameters under the same loss fits the cases at least as well by the loss's own measure (its median)."""
    rows = cv.in_sample_ceiling(DATA, SOC)
    shipped = cv.calibrate_all(DATA, SOC, loo=False)
    r = cal.report(shipped.cases, shipped.in_sample)["overall"]
    assert (rows[0]["loss"], rows[0]["free"]) == ("arctan", "shipped")
    assert rows[0]["median"] == pytest.approx(r["median"], abs=5e-4)  # (the report rounds to 0.1%)
    assert rows[0]["p90"] == pytest.approx(r["p90"], abs=5e-4)
    assert rows[0]["fitted"] == shipped.fitted.values
    assert set(rows[1]["fitted"]) > set(rows[0]["fitted"]) and rows[1]["median"] <= rows[0]["median"] + 1e-3
    assert rows[2]["fitted"] != rows[0]["fitted"]  # least squares weighs every case: another fit
    assert {(x["loss"], x["free"]) for x in rows} == {
        (loss, f) for loss, _ in cv.CEILING_LOSSES for f in ("shipped", "more")
    }

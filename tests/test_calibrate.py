"""Calibration: recovers known parameters, meets the target on the published set, rejects bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tiling_model import Variant, load_soc
from tiling_model.calibrate import (
    CalibrationCase,
    CalibrationError,
    calibrate,
    named_kernel,
    predict_measurement,
    read_csv,
    read_jsonl,
)
from tiling_model.kernels import bce_grad_kernel
from tiling_model.tiling import TilingParams

ROOT = Path(__file__).resolve().parents[1]
SIGMOID_CSV = ROOT / "data" / "calibration" / "sigmoid_910b2.csv"  # in the repository: these tests always run


def test_recovers_the_parameters_that_generated_the_data() -> None:
    truth = replace(load_soc("Ascend910B2"), launch_us=3.5, core_start_us=0.4, hbm_gbps=1100.0, l2_gbps=3000.0)
    shapes = [(4096,), (1 << 16,), (1 << 20,), (1 << 22,), (3 << 22,), (1 << 24,), (1 << 26,), (1 << 27,)]
    data = []
    for i, shape in enumerate(shapes):
        for kernel, warm in (
            (named_kernel("sigmoid", "float32"), True),
            (bce_grad_kernel(Variant("float16", "none")), False),
        ):
            m = CalibrationCase(f"synthetic:{i}", kernel, shape, TilingParams(), 1.0, warm)
            data.append(replace(m, measured_us=predict_measurement(m, truth)))
    start = load_soc("Ascend910B2")
    result = calibrate(replace(start, launch_us=2.0, core_start_us=0.1, hbm_gbps=1500.0, l2_gbps=5000.0), data)
    assert result.worst_abs_rel_error < 0.005
    for name, value in (("launch_us", 3.5), ("hbm_gbps", 1100.0), ("l2_gbps", 3000.0)):
        assert result.after[name] == pytest.approx(value, rel=0.03), name


def test_published_sigmoid_set_median_error_within_10_percent() -> None:
    data = read_csv(SIGMOID_CSV, "sigmoid")
    assert len(data) == 20
    result = calibrate(load_soc("Ascend910B2"), data)
    assert result.median_abs_rel_error < 0.10
    assert result.worst_abs_rel_error < 0.25


def test_shipped_910b2_profile_is_the_calibrated_one() -> None:
    soc = load_soc("Ascend910B2")
    assert soc.calibration is not None and soc.calibration["measured_on"] == "Ascend910B2"
    # the whole-data fit predicts the Sigmoid cases (in the steady state they were measured in) within 10%
    errors = [abs(predict_measurement(m, soc) / m.measured_us - 1) for m in read_csv(SIGMOID_CSV, "sigmoid")]
    assert sorted(errors)[len(errors) // 2] < 0.10


def test_jsonl_records_are_read_and_bad_lines_named(tmp_path: Path) -> None:
    good = {
        "kernel": {"kind": "bce_grad", "dtype": "float16", "reduction": "mean"},
        "shape": [1024, 1024],
        "params": {"block_bytes": 1024, "buffer_num": 2, "tile_bytes": 8192, "core_num": 48},
        "measured_us": 9.5,
        "l2": "cold",
    }
    path = tmp_path / "runs.jsonl"
    path.write_text(
        json.dumps(good)
        + "\n\n"
        + json.dumps(
            good | {"kernel": {"kind": "elementwise", "dtype": "float32", "inputs": 2, "outputs": 1, "ops": ["add"]}}
        )
        + "\n"
    )
    records = read_jsonl(path)
    assert [r.kernel.name for r in records] == ["bce_grad/logit", "elementwise"]
    assert records[0].params.tile_bytes == 8192 and not records[0].warm_l2
    for bad, needle in [
        ("{", "not valid JSON"),
        (json.dumps(good | {"measured_us": -1}), "must be positive"),
        (json.dumps(good | {"kernel": {"kind": "conv"}}), "kernel.kind must be"),
        (json.dumps(good | {"params": {"tile": 3}}), "unknown tiling parameter"),
        (json.dumps(good | {"l2": "hot"}), "KeyError"),
        (json.dumps({k: v for k, v in good.items() if k != "shape"}), "KeyError: 'shape'"),
    ]:
        path.write_text(json.dumps(good) + "\n" + bad + "\n")
        with pytest.raises(CalibrationError, match=r"runs.jsonl:2: ") as exc:
            read_jsonl(path)
        assert needle in str(exc.value)


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiling_model", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_calibrate_cli_writes_a_profile_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "profiles" / "Ascend910B2.json"
    r = run("calibrate", "--soc", "Ascend910B2", "--data", str(SIGMOID_CSV), "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["median_abs_rel_error"] < 0.10 and len(summary["residuals"]) == 20
    env_run = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tiling_model import load_soc; s = load_soc('Ascend910B2'); "
            "print(s.launch_us, s.calibration['cases'])",
        ],
        capture_output=True,
        text=True,
        env={"BCETUNE_PROFILES": str(out.parent), "PATH": ""},
        timeout=60,
    )
    assert env_run.returncode == 0, env_run.stderr
    assert env_run.stdout.split()[1] == "20"


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("case,shape,dtype,measured_device_us\n1,10x10,float32,abc\n")
    for args, needle in [
        (["calibrate", "--soc", "Ascend910B2", "--data", str(bad)], "bad.csv:2"),
        (["calibrate", "--soc", "Ascend999", "--data", str(bad)], "unknown SoC"),
        (["calibrate", "--soc", "Ascend910B2", "--data", str(tmp_path / "none.csv")], "cannot read"),
        (["predict", "--kernel", "elementwise", "--dtype", "float32", "--shape", "8"], "needs --inputs"),
        (
            ["predict", "--kernel", "bce_grad", "--dtype", "int32", "--reduction", "sum", "--shape", "8"],
            "supports reduction 'none' only",
        ),
        (
            ["predict", "--dtype", "float32", "--shape", "8", "--pos-weight", "full", "--wrt", "probability"],
            "pos_weight applies to wrt='logit' only",
        ),
    ]:
        r = run(*args)
        assert r.returncode == 2, args
        assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_predict_cli_json_and_model_best() -> None:
    r = run(
        "predict",
        "--kernel",
        "elementwise",
        "--inputs",
        "2",
        "--outputs",
        "1",
        "--ops",
        "add",
        "--dtype",
        "float32",
        "--shape",
        "1000000",
        "--best",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    for key in ("predicted_us", "roofline_us", "bottleneck", "bytes_moved", "fraction_of_roofline", "busy_us"):
        assert key in doc
    assert doc["bytes_moved"] == 3 * 1000000 * 4
    assert doc["best"]["predicted_us"] <= doc["predicted_us"] + 1e-9
    assert doc["best"]["configurations_scored"] > 10000


def test_plot_writes_pngs(tmp_path: Path) -> None:
    r = run("plot", "--soc", "Ascend310B1", "--dtypes", "int16", "--out-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    png = tmp_path / "model_Ascend310B1_int16.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10000


def test_the_profiles_dma_curves_are_the_measurements_in_the_repository() -> None:
    """Every point of each SoC profile's per-DMA curves is a row of data/mskpp_mte_curves_910b.csv
    (MSKPP, 910B1 single core), so the model's copy costs can be checked against their source here."""
    import csv

    rows = list(csv.DictReader((ROOT / "data" / "mskpp_mte_curves_910b.csv").open()))
    table = {(r["path"], float(r["size_KB"])): float(r["time_per_DMA_us(derived)"]) for r in rows}
    for name in ("Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4"):
        soc = load_soc(name)
        for path, curve in (("GM_TO_UB_910b1", soc.mte2_curve_kib_us), ("UB_TO_GM_910b1", soc.mte3_curve_kib_us)):
            for kib, us in curve:
                assert table[(path, float(kib))] == pytest.approx(us, abs=1e-4), (name, path, kib)

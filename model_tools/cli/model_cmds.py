"""``python -m model_tools predict | calibrate | plot``: the cost model from the command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from model_tools.cli.args import (
    L2_CHOICES,
    L2_HELP,
    SubParsers,
    csv_of,
    knob_flags,
    l2_state,
    parse_shape,
    positive_int,
    variant_flags,
    weight_of,
)
from tiling_model.confidence import interval
from tiling_model.cost import predict_detail
from tiling_model.dtypes import DTYPES, REDUCTIONS, UnsupportedError
from tiling_model.errors import BadRequest
from tiling_model.kernels import (
    NAMED_KERNELS,
    SCHEMES,
    VECTOR_OPS,
    ElementwiseKernel,
    bce_grad_kernel,
    elementwise_kernel,
)
from tiling_model.model_types import L2_STATES
from tiling_model.residual import summary_line
from tiling_model.soc import known_socs, load_soc, profile_to_json
from tiling_model.space import score_space
from tiling_model.tiling import TilingError, TilingParams, element_count, tile_kernel
from tiling_model.variant import Variant

#: What ``calibrate --free`` may name (model_tools.calibrate.BOUNDS, without importing scipy here).
_FITTABLE = (
    "launch_us", "core_start_us", "hbm_gbps", "l2_gbps", "l2_half_bytes", "l2_falloff", "vector_cycle_scale",
    "vector_start_cycles", "mte2_scale", "mte3_scale",
)  # fmt: skip


def add_model_commands(sub: SubParsers) -> None:
    p = sub.add_parser("predict", help="predict one launch of an elementwise or bce_grad kernel")
    p.add_argument("--soc", default="Ascend910B2")
    p.add_argument("--kernel", choices=("bce_grad", "elementwise", *NAMED_KERNELS), default="bce_grad")
    p.add_argument("--dtype", required=True, choices=DTYPES)
    p.add_argument("--shape", type=parse_shape, required=True)
    p.add_argument("--inputs", type=positive_int, help="elementwise: full input streams")
    p.add_argument("--outputs", type=positive_int, help="elementwise: output streams")
    p.add_argument("--ops", type=csv_of(VECTOR_OPS), help="elementwise: vector ops per tile, e.g. sub,mul,exp")
    p.add_argument("--reduction", default="none", choices=REDUCTIONS)
    variant_flags(p)
    knob_flags(p)
    p.add_argument("--scheme", default="exact", choices=SCHEMES)
    p.add_argument("--l2", choices=L2_CHOICES, default="cold", help=L2_HELP)
    p.add_argument("--best", action="store_true", help="also score the whole space and show the model's best")
    p.add_argument("--json", action="store_true")

    c = sub.add_parser(
        "calibrate",
        help="fit the model's per-SoC hardware parameters: on the shipped measurements (default; prints the "
        "leave-one-operator-out table) or on your own (--data)",
    )
    c.add_argument("--soc", default="Ascend910B2", help="the SoC the measurements were taken on")
    c.add_argument(
        "--data",
        type=Path,
        action="append",
        help="measurements to refit the hardware parameters to (repeatable): calibration CSVs of --kernel, "
        "JSON-lines records, or a directory like data/calibration; records of bcetune's kernel among them are "
        "fitted as --records fits them; without --data and --records: the shipped fit",
    )
    c.add_argument(
        "--records",
        type=Path,
        action="append",
        help="the tuner's records of bcetune's kernel on one device (python -m tuner sweep --records; repeatable): "
        "fits the device (hardware parameters, then the knob correction) with its held-out error",
    )
    c.add_argument(
        "--free",
        type=csv_of(tuple(_FITTABLE)),
        help="the parameters to fit (default: the device's where bcetune's kernel was recorded, else the shipped "
        "fit's); one the data cannot constrain (an L2 parameter of cold-L2 cases) is reported and kept",
    )
    c.add_argument("--calibration-dir", type=Path, default=Path("data/calibration"), help="the shipped measurements")
    c.add_argument("--no-loo", action="store_true", help="skip the leave-one-operator-out folds (~1 min)")
    c.add_argument(
        "--write",
        action="store_true",
        help="write the fitted profile and the other SoCs' derived estimates into tiling_model/socs (then re-sweep)",
    )
    c.add_argument("--scatter", type=Path, help="also draw predicted vs measured (log-log PNG) here")
    c.add_argument("--kernel", default="sigmoid", choices=sorted(NAMED_KERNELS), help="kernel the CSV files time")
    c.add_argument(
        "--csv-l2",
        choices=L2_CHOICES,
        default="steady",
        help="L2 state of the CSV measurements (CANN-Bench repeats launches after one flush: steady)",
    )
    c.add_argument("--out", type=Path, help="write the refitted profile here (load it via $BCETUNE_PROFILES)")
    c.add_argument("--json", action="store_true")

    v = sub.add_parser(
        "crossval", help="the model against measured operators: default settings and leave-one-operator-out fits"
    )
    v.add_argument("--soc", default="Ascend910B2", help="the SoC the data was measured on")
    v.add_argument("--data", type=Path, default=Path("data/calibration"), help="directory of the calibration CSVs")
    v.add_argument("--no-loo", action="store_true", help="only the default settings (seconds, not minutes)")
    v.add_argument(
        "--loss-scales",
        action="store_true",
        help="also: the held-out median at each robust-loss scale, and with the scale chosen inside each fold "
        "(about 15 min)",
    )
    v.add_argument("--json", action="store_true")

    g = sub.add_parser("plot", help="predicted time and fraction of roofline against size (PNG)")
    g.add_argument("--soc", action="append", help="SoC (repeatable; default all)")
    g.add_argument("--dtypes", default=",".join(DTYPES))
    g.add_argument("--out-dir", type=Path, default=Path("plots"), help="where the PNGs go (the docs' own: docs)")


def _kernel_from_args(a: argparse.Namespace) -> ElementwiseKernel:
    if a.kernel == "bce_grad":
        classes = a.shape[-1] if a.pos_weight == "last_dim" and a.shape else 1
        return bce_grad_kernel(_variant(a), a.scheme, classes, weight_of(a).period)
    if a.kernel == "elementwise":
        missing = [f for f in ("inputs", "outputs", "ops") if getattr(a, f) is None]
        if missing:
            raise TilingError(f"--kernel elementwise needs --{', --'.join(missing)}")
        return elementwise_kernel(a.dtype, a.inputs, a.outputs, a.ops)
    return elementwise_kernel(a.dtype, *NAMED_KERNELS[a.kernel][:2], NAMED_KERNELS[a.kernel][2], name=a.kernel)


def _variant(a: argparse.Namespace) -> Variant:
    return Variant(a.dtype, a.reduction, weight_of(a).form, a.pos_weight, a.wrt, a.mode)


def _predict(a: argparse.Namespace) -> int:
    soc = load_soc(a.soc)
    kernel = _kernel_from_args(a)
    params = TilingParams(a.block_bytes, a.buffer_num, a.tile_bytes, a.core_num)
    variant = _variant(a) if a.kernel == "bce_grad" else None
    classes = a.shape[-1] if variant is not None and variant.pos_weight == "last_dim" and a.shape else 0
    t = tile_kernel(kernel, a.shape, params, soc, a.scheme, variant, classes)
    warm = l2_state(a.l2)
    detail = predict_detail(t, soc, warm)
    doc: dict[str, Any] = {
        "soc": soc.name,
        "kernel": kernel.name,
        "params": t.params.as_dict(),
        **detail.as_dict(),
    }
    doc |= interval(t, soc, detail.predicted_us).fields()
    if a.best:
        scored = score_space(kernel, soc, max(element_count(a.shape), 1), warm)
        i = scored.best_index()
        best_us, roof = float(scored.result.predicted_us[i]), float(scored.result.roofline_us[i])
        doc["best"] = {
            "params": scored.params(i).as_dict(),
            "predicted_us": round(best_us, 4),
            "roofline_us": round(roof, 4),
            "fraction_of_roofline": round(roof / best_us, 4),
            "configurations_scored": len(scored),
        }
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0
    p = doc["params"]
    print(
        f"{soc.name} {kernel.name} {a.dtype} shape={a.shape}  block_bytes={p['block_bytes']} "
        f"buffer_num={p['buffer_num']} tile_bytes={p['tile_bytes']} core_num={p['core_num']}"
    )
    lo, hi = doc["predicted_interval_us"]
    within = f" (expected {lo:.3f} to {hi:.3f}: {doc['predicted_interval_basis']}, 10-90%)"
    print(
        f"predicted {doc['predicted_us']:.3f} us{within}, roofline {doc['roofline_us']:.3f} us "
        f"({100 * doc['fraction_of_roofline']:.1f}%), {doc['bottleneck']}-bound, {doc['bytes_moved']} B, "
        f"{doc['achieved_gbps']:.1f} GB/s; busy {doc['busy_us']}"
    )
    if a.best:
        b = doc["best"]
        print(
            f"model best of {b['configurations_scored']} configurations: {b['params']} -> {b['predicted_us']} us "
            f"({100 * b['fraction_of_roofline']:.1f}% of roofline)"
        )
    return 0


def _calibrate(a: argparse.Namespace) -> int:
    """One fit (model_tools.calibrate), on the shipped measurements, your own, or a device's records."""
    from model_tools import calibrate as cal  # the fit (scipy): a tuning extra

    if not a.data and not a.records:
        return _calibrate_shipped(a)
    soc = load_soc(a.soc)
    # One path, whichever flag names the files: records of bcetune's own kernel (the tuner's, read by
    # --records or by --data from a .jsonl) get the device fit (hardware and knob correction, held out by
    # key); measurements of other operators alone get the hardware fit.
    cases = cal.read_records(a.records or [], soc)  # (together: a second look's records supersede a first race's)
    cases += cal.read_data(a.data or [], soc, a.kernel, l2_state(a.csv_l2))
    sources = [str(p) for p in (*(a.records or []), *(a.data or []))]
    if any(m.op == "bce_grad" for m in cases):
        device = cal.fit_device(cases, soc, tuple(a.free) if a.free else cal.DEVICE_PARAMS)
        profile, summary = device.profile, device.summary()
        residuals = [(m, e) for m, e in zip(device.cases, device.after, strict=True)]
    else:
        result = cal.calibrate(soc, cases, tuple(a.free) if a.free else cal.PARAMS)
        profile, doc = result.profile, result.as_dict()
        summary = {k: v for k, v in doc.items() if k != "residuals"}
        residuals = [(m, e) for m, e in zip(result.cases, result.after, strict=True)]
    summary = {"data": sources, **summary}
    if a.out:
        out = profile_to_json(profile)
        how = f"fitted by `python -m model_tools calibrate` on {', '.join(sources)} ({len(cases)} cases)"
        for name in summary["fitted"]:
            field = {"mte2_scale": "mte2_curve_kib_us", "mte3_scale": "mte3_curve_kib_us"}.get(name, name)
            out["sources"][field] = how
        if not profile.knob_correction.identity:
            out["sources"]["knob_correction"] = how + ": the device's knob effects (tiling_model.correction)"
        out["calibration"] = {"measured_on": soc.name, **summary}
        with _writing(a.out):
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(out, indent=2) + "\n")
    if a.json:
        print(json.dumps(summary | {"residuals": [_residual(m, e) for m, e in residuals]}, indent=2))
        return 0
    before = float(summary.get("median_abs_rel_error_before", summary.get("median_before", 0.0)))
    after = float(summary["median"])
    print(f"{soc.name}: {len(cases)} cases; median |error| {100 * before:.1f}% before, {100 * after:.1f}% after")
    if "held_out_median" in summary:
        held = 100 * summary["held_out_median"]
        print(f"  held out by key (folds of keys, each predicted by a fit without its keys): {held:.1f}%")
    for k, v in summary["fitted"].items():
        start = getattr(soc, k) if hasattr(soc, k) else 1.0
        told = summary.get("fitted_uncertainty", {}).get(k, "")
        print(f"  {k:<20} {start:>12.4f} -> {v:>12.4f}   {told.partition(' ')[2]}")
    for k, why in summary.get("not_fitted", {}).items():
        print(f"  {k:<20} not fitted, kept at the profile's {getattr(soc, k):g}: {why}")
    if summary.get("knob_correction"):
        print(f"  knob correction: {summary['knob_correction']}")
    if "residual" in summary:
        print(f"  residual over the realised tiling: {summary_line(summary['residual'])}")
    for m, e in residuals:
        print(f"  {m.source:<50} {m.op:<12} measured {m.measured_us:>9.2f} predicted {m.measured_us * (1 + e):>9.2f} "
              f"({100 * e:+.1f}%)")  # fmt: skip
    if a.out:
        print(f"wrote {a.out}")
    return 0


def _residual(m: Any, e: float) -> dict[str, Any]:
    return {"case": m.source, "op": m.op, "measured_us": m.measured_us,
            "predicted_us": round(m.measured_us * (1 + e), 4), "rel_error": round(float(e), 4)}  # fmt: skip


def _plot(a: argparse.Namespace) -> int:
    from model_tools.plot import plot_all

    socs = a.soc or list(known_socs())
    for s in socs:
        load_soc(s)
    dtypes = [d for d in a.dtypes.split(",") if d]
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise UnsupportedError(f"unknown dtype(s) {', '.join(bad)}; supported: {', '.join(DTYPES)}")
    for path in plot_all(socs, dtypes, a.out_dir):
        print(f"wrote {path}")
    return 0


def _print_report(name: str, r: dict[str, Any]) -> None:
    print(f"\n{name}")
    groups = {"all": r["overall"], **r["by_operator"], **r["by_traffic"]}
    for label, st in groups.items():
        if st["cases"]:
            print(
                f"  {label:<14} {st['cases']:>4}  {100 * st['median']:6.1f}% {100 * st['p90']:6.1f}% "
                f"{100 * st['worst']:6.1f}%  bias {100 * st['bias']:+6.1f}%"
            )


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An output file that cannot be written is a clear error naming it, not a traceback."""
    try:
        yield
    except OSError as e:
        raise BadRequest(f"cannot write {path}: {e.strerror or e}") from None


def _calibrate_shipped(a: argparse.Namespace) -> int:
    from model_tools import crossval as cv

    soc = load_soc(a.soc)
    cal = cv.calibrate_all(a.calibration_dir, soc, loo=not a.no_loo)
    files = [str(a.calibration_dir / f) for f in cv.CALIBRATION_FILES]
    summary = cal.summary(files)
    reports = {"fit on every operator (in sample)": cv.report(cal.cases, cal.in_sample)}
    if cal.held_out is not None:
        reports["leave-one-operator-out (each operator predicted by a fit on the others)"] = cv.report(
            cal.cases, cal.held_out
        )
    if a.json:
        folds = {op: f.values for op, f in cal.folds.items()}
        print(json.dumps({"soc": soc.name, "fitted": cal.fitted.values, "reports": reports, "folds": folds}, indent=2))
    else:
        print(f"{soc.name}: {len(cal.cases)} measured calls ({summary['cases']} primary) from {a.calibration_dir}")
        print("fitted: " + ", ".join(f"{k}={v:g}" for k, v in cal.fitted.values.items()))
        print("|error| of predicted vs measured, primary cases: median / p90 / worst (bias: median signed error)")
        for name, r in reports.items():
            _print_report(name, r)
        for op, f in cal.folds.items():
            print(f"fit without {op}: " + ", ".join(f"{k}={v:g}" for k, v in f.values.items()))
    if a.scatter:
        from model_tools.calibration_plot import calibration_scatter

        errs = cal.held_out if cal.held_out is not None else cal.in_sample
        with _writing(a.scatter):
            calibration_scatter(cal.cases, errs, a.scatter, "held out" if cal.held_out is not None else "in sample")
        print(f"wrote {a.scatter}")
    if a.write:
        if cal.held_out is None:
            raise BadRequest("--write records the cross-validation error in the profiles: drop --no-loo")
        from tiling_model.soc import profile_dir

        for name, text in cal.profile_texts(files).items():
            path = Path(str(profile_dir())) / f"{name}.json"
            with _writing(path):
                path.write_text(text)
            print(f"wrote {path}")
    return 0


def _crossval(a: argparse.Namespace) -> int:
    from model_tools import crossval as cv
    from model_tools.calibrate import errors

    soc = load_soc(a.soc)
    cases = cv.read_all(a.data, soc)
    rows: dict[str, Any] = {}
    for name, l2 in (
        ("shipped profile, in the L2 state of the measurements (steady)", "steady"),
        ("L2 cold", "cold"),
        ("L2 warm", "warm"),
    ):
        rows[name] = cv.report(cases, errors(cases, soc, L2_STATES[l2]))
    folds: dict[str, dict[str, float]] = {}
    if not a.no_loo:
        cal = cv.calibrate_all(a.data, soc)
        assert cal.held_out is not None
        rows["leave-one-operator-out (calibrate's fit, each operator held out)"] = cv.report(cal.cases, cal.held_out)
        folds = {op: f.values for op, f in cal.folds.items()}
    study = cv.loss_scale_study(a.data, soc) if a.loss_scales else None
    if a.json:
        doc = {"soc": soc.name, "cases": len(cases), "reports": rows, "folds": folds, "loss_scales": study}
        print(json.dumps(doc, indent=2))
        return 0
    print(f"{soc.name}: {len(cases)} measured calls ({sum(m.primary for m in cases)} primary) from {a.data}")
    print("|error| of predicted vs measured, primary cases: median / p90 / worst (bias: median signed error)")
    for name, r in rows.items():
        _print_report(name, r)
    for op, values in folds.items():
        print(f"fit without {op}: " + ", ".join(f"{k}={v:g}" for k, v in values.items()))
    if study:
        print(f"\nleave-one-operator-out median by robust-loss scale (shipped: {study['shipped']}):")
        for f, med in study["fixed"].items():
            print(f"  f_scale {f:>5}: {100 * med:.1f}%")
        chosen = ", ".join(f"{op} {f}" for op, f in study["chosen"].items())
        print(f"  scale chosen inside each fold (nested): {100 * study['nested']:.1f}%  ({chosen})")
    return 0


def run_model_command(a: argparse.Namespace) -> int:
    try:
        return {"predict": _predict, "calibrate": _calibrate, "crossval": _crossval, "plot": _plot}[a.command](a)
    except BadRequest as e:
        print(f"python -m model_tools: error: {e}", file=sys.stderr)
        return 2

"""Predicted against measured time of the calibration cases: log-log, one colour per operator."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from model_tools.calibrate import Measured


def calibration_scatter(cases: Sequence[Measured], errors: np.ndarray, out: Path, label: str) -> None:
    """One point per primary case at (measured, predicted) with predicted = measured * (1 + error); the
    diagonal and the +-15% band for reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 6.5), dpi=110)
    measured = np.array([m.measured_us for m in cases])
    predicted = measured * (1.0 + np.asarray(errors))
    primary = np.array([m.primary for m in cases])
    for op in sorted({m.op for m in cases}):
        mine = primary & np.array([m.op == op for m in cases])
        if mine.any():
            med = float(np.median(np.abs(np.asarray(errors)[mine])))
            ax.scatter(measured[mine], predicted[mine], s=22, label=f"{op} (median {100 * med:.0f}%)")
    lo, hi = 0.5 * min(measured.min(), predicted.min()), 2.0 * max(measured.max(), predicted.max())
    line = np.array([lo, hi])
    ax.plot(line, line, color="black", lw=1)
    ax.fill_between(line, line * 0.85, line * 1.15, color="grey", alpha=0.15, label="+-15%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured device time (us), Ascend910B2, CANN-Bench")
    ax.set_ylabel(f"predicted (us), {label}")
    ax.set_title("bcetune cost model against measured operators")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)

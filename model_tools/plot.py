"""PNG plots: predicted time and fraction of roofline against element count.

For each SoC and dtype (BCE grad, reduction none, weight present): the seed's tiling as the
requirement computes it, the model's best tiling over the whole search space, and the
roofline (launch plus bytes over HBM bandwidth).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tiling_model.cost import predict_detail
from tiling_model.kernels import bce_grad_kernel
from tiling_model.soc import load_soc
from tiling_model.space import score_space
from tiling_model.tiling import compute_tiling
from tiling_model.variant import Variant

SIZES = tuple(int(x) for x in np.unique(np.logspace(3, 9, 25).astype(np.int64)))


def curves(soc_name: str, dtype: str, sizes: tuple[int, ...] = SIZES) -> dict[str, np.ndarray]:
    soc = load_soc(soc_name)
    variant = Variant(dtype, "none")  # type: ignore[arg-type]
    kernel = bce_grad_kernel(variant)
    seed, best, roof, seed_frac, best_frac = [], [], [], [], []
    for n in sizes:
        s = predict_detail(compute_tiling([n], variant, scheme="seed", soc=soc), soc)
        scored = score_space(kernel, soc, n)
        i = scored.best_index()
        b_us, b_roof = float(scored.result.predicted_us[i]), float(scored.result.roofline_us[i])
        seed.append(s.predicted_us)
        best.append(b_us)
        roof.append(b_roof)
        seed_frac.append(s.fraction_of_roofline)
        best_frac.append(b_roof / b_us)
    return {
        "n": np.array(sizes),
        "seed": np.array(seed),
        "best": np.array(best),
        "roofline": np.array(roof),
        "seed_frac": np.array(seed_frac),
        "best_frac": np.array(best_frac),
    }


def plot_one(soc_name: str, dtype: str, out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = curves(soc_name, dtype)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.loglog(c["n"], c["seed"], "o-", ms=3, label="seed: the requirement's tiling and kernel")
    ax1.loglog(c["n"], c["best"], "s-", ms=3, label="model-best tiling, bcetune's kernel")
    ax1.loglog(c["n"], c["roofline"], "k--", label="roofline (launch + bytes / peak HBM and L2 bandwidth)")
    ax1.set_xlabel("elements")
    ax1.set_ylabel("predicted time (us)")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend()
    ax2.semilogx(c["n"], c["seed_frac"], "o-", ms=3, label="seed")
    ax2.semilogx(c["n"], c["best_frac"], "s-", ms=3, label="model-best, bcetune's kernel")
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("elements")
    ax2.set_ylabel("fraction of roofline")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend()
    fig.suptitle(f"BinaryCrossEntropyGrad {dtype}, reduction none, weight — {soc_name} (cost model, cold L2)")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"model_{soc_name}_{dtype}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(socs: list[str], dtypes: list[str], out_dir: Path) -> list[Path]:
    return [plot_one(s, d, out_dir) for s in socs for d in dtypes]

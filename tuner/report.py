"""``python -m tuner report --out-dir DIR``: a markdown report with PNGs for one table: speedup of
tuned over the seed default per size bucket and dtype, trials spent, and (``--regret N``) the
regret on N held-out sizes against the best of the whole space at each exact size."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tiling_model import compute_tiling, load_soc, predict
from tiling_model.kernels import bce_grad_kernel
from tiling_model.pick import refit
from tiling_model.space import score_space
from tiling_model.tables import TuningTable, variant_order


@dataclass(frozen=True)
class Regret:
    values: tuple[float, ...]  # sorted, relative (0.05 = 5% slower than the best at that size)
    worst_case: str

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def p95(self) -> float:
        return self.values[int(0.95 * (len(self.values) - 1))]

    @property
    def worst(self) -> float:
        return self.values[-1]


def held_out_regret(
    table: TuningTable, count: int, seed: int = 7, policy: str = "refit", progress: bool = False
) -> Regret:
    """Regret of the unseen-size policy on ``count`` log-uniform held-out sizes (model, noise-free):
    ``refit`` (what the service and the C++ build do: the bucket's BUFFER_NUM, or with a device's fit every
    one, block, cores and tile re-fit at the exact size) or ``nearest`` (the bucket's knobs as they are)."""
    soc = load_soc(table.soc)
    variants = sorted({e.variant for e in table.entries}, key=variant_order)
    sizes = sorted({e.size for e in table.entries})
    rng = np.random.default_rng(seed)
    out, worst = [], (-1.0, "")
    for _ in tqdm(range(count), desc=f"regret ({policy})", unit="size", disable=not progress):
        v = variants[rng.integers(len(variants))]
        n = int(np.exp(rng.uniform(np.log(sizes[0]), np.log(sizes[-1]))))
        e = table.lookup(v, n)
        if e is None:
            continue
        params = e.tiling_params()
        if policy == "refit" and e.size != n:
            params = refit(n, v, soc, params)
        t = compute_tiling([n], v, params, soc)
        best = float(score_space(bce_grad_kernel(v, classes=1), soc, n).result.predicted_us.min())
        r = predict(t, soc) / best - 1
        out.append(r)
        if r > worst[0]:
            worst = (r, f"{v.dtype}/{v.reduction}/weight={v.weight} at n={n} (entry tuned at {e.size})")
    return Regret(tuple(sorted(out)), worst[1])


def write_report(table: TuningTable, out_dir: Path, regret_sizes: int = 0) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    soc = table.soc
    dtypes = sorted({e.variant.dtype for e in table.entries})
    fig, ax = plt.subplots(figsize=(8, 4.5))
    lines = [
        f"# Tuning report: {soc}",
        "",
        f"Table created {table.created}, backend `{table.backend}`, {table.trials_per_study} trials per study, "
        f"{len(table.entries)} entries, SoC profile `{table.soc_profile_hash}`, kernel `{table.kernel_hash}`.",
        "",
        "## Speedup of tuned over the seed default (geometric mean over the variants of each bucket)",
        "",
        "| size | " + " | ".join(dtypes) + " |",
        "|---|" + "---|" * len(dtypes),
    ]
    sizes = sorted({e.size for e in table.entries})
    for d in dtypes:
        curve = []
        for s in sizes:
            ratios = [e.seed_default_us / e.tuned_us for e in table.entries if e.variant.dtype == d and e.size == s]
            curve.append(float(np.exp(np.mean(np.log(ratios)))))
        ax.semilogx(sizes, curve, "o-", ms=3, label=d)
    for s in sizes:
        cells = []
        for d in dtypes:
            ratios = [e.seed_default_us / e.tuned_us for e in table.entries if e.variant.dtype == d and e.size == s]
            cells.append(f"{np.exp(np.mean(np.log(ratios))):.3f}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("elements (bucket)")
    ax.set_ylabel("seed default time / tuned time")
    ax.set_title(f"{soc}: predicted speedup of the tuned tiling ({table.backend} backend)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png = out_dir / f"speedup-{soc}.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    trials = [e.trials for e in table.entries]
    lines += [
        "",
        f"![speedup]({png.name})",
        "",
        "## Trials spent",
        "",
        f"{sum(trials)} completed trials over {len(trials)} studies (median {statistics.median(trials)}, "
        f"max {max(trials)}).",
    ]
    if regret_sizes:
        lines += [
            "",
            "## Regret on held-out sizes",
            "",
            f"{regret_sizes} log-uniform sizes between the tuned ones, random variant keys, against the best of the "
            "whole space at each exact size (cost model):",
            "",
            "| policy | median | 95th percentile | worst | worst case |",
            "|---|---|---|---|---|",
        ]
        for policy, label in (("refit", "re-fit (the service and the C++ build)"), ("nearest", "nearest bucket as is")):
            r = held_out_regret(table, regret_sizes, policy=policy, progress=True)
            lines.append(
                f"| {label} | {100 * r.median:.2f}% | {100 * r.p95:.2f}% | {100 * r.worst:.2f}% | {r.worst_case} |"
            )
    md = out_dir / f"report-{soc}.md"
    md.write_text("\n".join(lines) + "\n")
    return md

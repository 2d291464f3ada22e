"""Cost-model speed, side by side in one run: the engine (tiling_model.engine, the C++ model the build
compiles) against its specification (tiling_model.simulate, NumPy, vectorised; the same numbers to the
bit) for one prediction, one re-fit (a bucket's block, cores and tile at an exact size) and scoring a
whole search space.

Run: ``make bench-model`` (or ``.venv/bin/python benchmarks/model_speed.py``). Prints medians of repeated
timings measured in this run; no thresholds (this machine is shared and noisy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

import tiling_model.simulate as sim
from tiling_model import TilingParams, Variant, compute_tiling, engine, load_soc, predict
from tiling_model.cost import kinds_of
from tiling_model.kernels import bce_grad_kernel
from tiling_model.pick import refit
from tiling_model.space import ScoredSpace, enumerate_space, score_space


def median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def spec_space(kernel: object, soc: object, n: int, buffers: tuple[int, ...] | None = None) -> ScoredSpace:
    block, bn, tile, cores = enumerate_space(kernel, soc, n, None, buffers)  # type: ignore[arg-type]
    kinds = engine.core_kinds(n, kernel.elem_bytes, block, bn, tile, cores)
    return ScoredSpace(block, bn, tile, cores, sim.simulate(kernel, kinds, soc, np.full(block.shape, n)))  # type: ignore[arg-type]


def main() -> None:
    soc = load_soc("Ascend910B2")
    cases = ((1024, "float32"), (1 << 20, "float16"), (3_000_017, "float16"), (1 << 26, "float32"))
    tuned = TilingParams(512, 2, 8192, 48)  # a bucket's knobs; the re-fit keeps BUFFER_NUM
    print(f"{'case':<44}{'spec (NumPy)':>13}{'engine':>11}{'ratio':>9}")
    for n, dtype in cases:
        v = Variant(dtype, "none")
        t = compute_tiling([n], v, soc=soc)
        kernel = bce_grad_kernel(v)
        rows = [
            (
                "predict 1 tiling",
                median_s(lambda t=t: sim.simulate(t.kernel, kinds_of(t), soc, np.array([t.n])), 200),
                median_s(lambda t=t: predict(t, soc), 2000),
            ),
            (
                "re-fit a bucket (BUFFER_NUM 2)",
                median_s(lambda k=kernel, n=n: spec_space(k, soc, n, (2,)).best_index(), 3),
                median_s(lambda n=n, v=v: refit(n, v, soc, tuned), 200),
            ),
        ]
        for what, slow_s, fast_s in rows:
            label = f"{what}, n={n} {dtype}"
            print(f"{label:<44}{slow_s * 1e3:>11.3f}ms{fast_s * 1e3:>9.3f}ms{slow_s / fast_s:>8.1f}x")
    print(f"\n{'case':<40}{'configs':>9}{'spec (NumPy)':>14}{'engine':>11}{'per config':>13}")
    for n, dtype in cases:
        kernel = bce_grad_kernel(Variant(dtype, "none"))
        scored = score_space(kernel, soc, n)
        spec = median_s(lambda kernel=kernel, n=n: spec_space(kernel, soc, n), 3)
        whole = median_s(lambda kernel=kernel, n=n: score_space(kernel, soc, n), 5)
        print(
            f"{'score whole space, n=' + str(n) + ' ' + dtype:<40}{len(scored):>9}{spec * 1e3:>12.1f}ms"
            f"{whole * 1e3:>9.1f}ms{whole / len(scored) * 1e6:>11.3f}us"
        )


if __name__ == "__main__":
    main()

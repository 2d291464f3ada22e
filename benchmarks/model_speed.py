"""Cost-model speed, side by side in one run: one prediction and one re-fit (a bucket's cores and tile
at an exact size), NumPy against the compiled model (tiling_model.compiled, numba; the same answers),
and scoring a whole search space (NumPy, vectorised).

Run: ``make bench-model`` (or ``.venv/bin/python benchmarks/model_speed.py``). Prints medians
of repeated timings measured in this run; no thresholds (this machine is shared and noisy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from tiling_model import TilingParams, Variant, compiled, compute_tiling, load_soc, predict
from tiling_model.kernels import bce_grad_kernel
from tiling_model.search import refit
from tiling_model.space import score_space


def median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    soc = load_soc("Ascend910B2")
    cases = ((1024, "float32"), (1 << 20, "float16"), (3_000_017, "float16"), (1 << 26, "float32"))
    tuned = TilingParams(512, 2, 8192, 48)  # a bucket's knobs; the re-fit keeps BUFFER_NUM
    numpy_timings = {}
    for n, dtype in cases:  # the NumPy model first: compiled.ready() is False until warm_up
        t = compute_tiling([n], Variant(dtype, "none"), soc=soc)
        numpy_timings[(n, dtype)] = (
            median_s(lambda t=t: predict(t, soc), 200),
            median_s(lambda n=n, dtype=dtype: refit(n, Variant(dtype, "none"), soc, tuned), 20),
        )
    print(f"compiled model warm-up (compile or load numba's cache): {compiled.warm_up():.2f} s")
    print(f"{'case':<44}{'NumPy':>11}{'compiled':>11}{'ratio':>8}")
    for n, dtype in cases:
        t = compute_tiling([n], Variant(dtype, "none"), soc=soc)
        fast = (
            median_s(lambda t=t: predict(t, soc), 2000),
            median_s(lambda n=n, dtype=dtype: refit(n, Variant(dtype, "none"), soc, tuned), 200),
        )
        for what, slow_s, fast_s in zip(
            ("predict 1 tiling", "re-fit a bucket"), numpy_timings[(n, dtype)], fast, strict=True
        ):
            label = f"{what}, n={n} {dtype}"
            print(f"{label:<44}{slow_s * 1e3:>9.3f}ms{fast_s * 1e3:>9.3f}ms{slow_s / fast_s:>7.1f}x")
    print(f"\n{'case':<40}{'configs':>9}{'median':>12}{'per config':>14}")
    for n, dtype in cases:
        kernel = bce_grad_kernel(Variant(dtype, "none"))
        scored = score_space(kernel, soc, n)
        whole = median_s(lambda kernel=kernel, n=n: score_space(kernel, soc, n), 5)
        print(
            f"{'score whole space, n=' + str(n) + ' ' + dtype:<40}{len(scored):>9}{whole * 1e3:>10.1f}ms"
            f"{whole / len(scored) * 1e6:>12.2f}us"
        )


if __name__ == "__main__":
    main()

"""Cost-model speed: one prediction (the service's fallback path) and scoring a whole search space.

Run: ``make bench-model`` (or ``.venv/bin/python benchmarks/model_speed.py``). Prints medians
of repeated timings measured in this run; no thresholds (this machine is shared and noisy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from tiling_model import Variant, compute_tiling, load_soc, predict
from tiling_model.kernels import bce_grad_kernel
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
    print(f"{'case':<40}{'configs':>9}{'median':>12}{'per config':>14}")
    for n, dtype in ((1024, "float32"), (1 << 20, "float16"), (1 << 26, "float32")):
        t = compute_tiling([n], Variant(dtype, "none"), soc=soc)
        single = median_s(lambda t=t: predict(t, soc), 200)
        print(
            f"{'predict 1 tiling, n=' + str(n) + ' ' + dtype:<40}{1:>9}{single * 1e3:>10.3f}ms{single * 1e6:>12.1f}us"
        )
        kernel = bce_grad_kernel(Variant(dtype, "none"))
        scored = score_space(kernel, soc, n)
        whole = median_s(lambda kernel=kernel, n=n: score_space(kernel, soc, n), 5)
        print(
            f"{'score whole space, n=' + str(n) + ' ' + dtype:<40}{len(scored):>9}{whole * 1e3:>10.1f}ms"
            f"{whole / len(scored) * 1e6:>12.2f}us"
        )


if __name__ == "__main__":
    main()

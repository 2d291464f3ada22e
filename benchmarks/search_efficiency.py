"""Search efficiency on the model backend with realistic noise: trials until the incumbent (the
best measured so far) is truly within 2% of the exhaustive optimum, for model-seeded TPE, plain
TPE and random search, side by side on the same shapes.

Run: ``make bench-search`` (``--shapes``, ``--budget``, ``--noise``). Truth is the noise-free model;
the optimum is the best of the whole search space scored exhaustively.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import optuna

from tiling_model import Variant, compute_tiling, load_soc, predict, valid_combinations
from tiling_model.space import score_space
from tuner.search_space import SearchSpace

STRATEGIES = ("model-seeded TPE", "plain TPE", "random")


def trials_to_reach(
    strategy: str, space: SearchSpace, n: int, optimum: float, budget: int, noise: float, seed: int
) -> int | None:
    rng = np.random.default_rng(seed)
    if strategy == "random":
        sampler: optuna.samplers.BaseSampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=10)
    study = optuna.create_study(sampler=sampler)
    if strategy == "model-seeded TPE":
        study.enqueue_trial(space.default_point())
        for point in space.model_best_points(n, 3):
            study.enqueue_trial(point)
    best_measured, best_true = float("inf"), float("inf")
    for i in range(1, budget + 1):
        trial = study.ask()
        t = compute_tiling([n], space.variant, space.suggest(trial), space.soc)
        true = predict(t, space.soc)
        measured = true * float(np.exp(rng.normal(0.0, noise)))
        study.tell(trial, measured)
        if measured < best_measured:
            best_measured, best_true = measured, true
        if best_true <= 1.02 * optimum:
            return i
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", type=int, default=50)
    ap.add_argument("--budget", type=int, default=80)
    ap.add_argument("--noise", type=float, default=0.03)
    ap.add_argument("--soc", default="Ascend910B2")
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    soc = load_soc(a.soc)
    rng = np.random.default_rng(2026)
    combos = valid_combinations()
    results: dict[str, list[int | None]] = {s: [] for s in STRATEGIES}
    for k in range(a.shapes):
        dtype, reduction = combos[rng.integers(len(combos))]
        n = int(np.exp(rng.uniform(np.log(1e3), np.log(3e8))))
        space = SearchSpace(soc, Variant(dtype, reduction, bool(rng.random() < 0.7)))
        scored = score_space(space.kernel, soc, n)
        optimum = float(scored.result.predicted_us.min())
        for s in STRATEGIES:
            results[s].append(trials_to_reach(s, space, n, optimum, a.budget, a.noise, seed=k))
        print(f"\rshape {k + 1}/{a.shapes}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(
        f"{a.shapes} shapes (random dtype, reduction, weight; 1e3..3e8 elements), {a.soc}, noise {a.noise:.0%}, "
        f"budget {a.budget} trials; trials until the incumbent is within 2% of the exhaustive optimum:"
    )
    print(f"{'strategy':<18}{'median':>8}{'worst':>8}{'not reached':>13}")
    medians = {}
    for s in STRATEGIES:
        got = [r if r is not None else a.budget + 1 for r in results[s]]
        medians[s] = statistics.median(got)
        missed = sum(r is None for r in results[s])
        worst = max(got)
        worst_text = f">{a.budget}" if worst > a.budget else str(worst)
        print(f"{s:<18}{medians[s]:>8.1f}{worst_text:>8}{missed:>13}")
    ratio = medians["random"] / medians["model-seeded TPE"]
    print(f"random needs {ratio:.1f}x the trials of model-seeded TPE (median; unreached counted as budget + 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

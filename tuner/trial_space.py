"""The search space: the four tiling knobs, valid by construction for one variant.

buffer_num choices are pre-filtered by the queue limit, and tile_bytes is sampled as a
fraction of the largest tile the UB holds at the chosen buffer_num (rounded to whole 512-B
blocks), so TPE never proposes a configuration that overflows UB. ``validate`` still checks
every configuration before it is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from tiling_model import BadRequest, SocProfile, TilingParams, Variant
from tiling_model.kernels import ElementwiseKernel, bce_grad_kernel
from tiling_model.space import BLOCK_CHOICES, BUFFER_CHOICES, TILE_STEP_BYTES, score_space
from tiling_model.tiling import KNOB_NAMES, resolve_params


@dataclass(frozen=True)
class TrialSpace:
    soc: SocProfile
    variant: Variant

    @property
    def kernel(self) -> ElementwiseKernel:
        # a last-dim pos_weight's UB use does not depend on C; 1 stands for any C
        return bce_grad_kernel(self.variant, classes=1)

    @property
    def buffer_choices(self) -> tuple[int, ...]:
        return self.kernel.allowed_buffer_nums(BUFFER_CHOICES)

    def max_tile_bytes(self, buffer_num: int) -> int:
        return self.kernel.max_tile_bytes(self.soc.ub_usable_bytes, buffer_num)

    def tile_from_fraction(self, fraction: float, buffer_num: int) -> int:
        top = self.max_tile_bytes(buffer_num)
        tile = int(fraction * top) // TILE_STEP_BYTES * TILE_STEP_BYTES
        return min(max(tile, TILE_STEP_BYTES), top // TILE_STEP_BYTES * TILE_STEP_BYTES)

    def suggest(self, trial: optuna.Trial) -> TilingParams:
        block = trial.suggest_categorical("block_bytes", BLOCK_CHOICES)
        bn = trial.suggest_categorical("buffer_num", self.buffer_choices)
        frac = trial.suggest_float("tile_fraction", 0.0, 1.0)
        cores = trial.suggest_int("core_num", 1, self.soc.aiv_cores)
        return TilingParams(block, bn, self.tile_from_fraction(frac, bn), cores)

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """What ``suggest`` asks for, as Optuna distributions (for trials made outside a study's ask)."""
        return {
            "block_bytes": optuna.distributions.CategoricalDistribution(BLOCK_CHOICES),
            "buffer_num": optuna.distributions.CategoricalDistribution(self.buffer_choices),
            "tile_fraction": optuna.distributions.FloatDistribution(0.0, 1.0),
            "core_num": optuna.distributions.IntDistribution(1, self.soc.aiv_cores),
        }

    def params_of(self, point: dict[str, float | int]) -> TilingParams:
        """The knobs a trial's parameters stand for (``suggest``'s mapping)."""
        bn = int(point["buffer_num"])
        return TilingParams(int(point["block_bytes"]), bn, self.tile_from_fraction(float(point["tile_fraction"]), bn),
                            int(point["core_num"]))  # fmt: skip

    def default_params(self) -> TilingParams:
        p = resolve_params(None, self.kernel, self.soc, "exact")
        return TilingParams(p.block_bytes, p.buffer_num, p.tile_bytes, p.core_num)

    def default_point(self) -> dict[str, float | int]:
        """The default knobs (block 512, 2 buffers where the queue limit allows, whole-block max
        tile, all cores): what ``compute_tiling`` uses when no knob is given."""
        p = resolve_params(None, self.kernel, self.soc, "exact")
        return self.point_of(TilingParams(p.block_bytes, p.buffer_num, p.tile_bytes, p.core_num))

    def point_of(self, params: TilingParams) -> dict[str, float | int]:
        """The trial parameters that reproduce ``params`` (every knob given; the tile as a fraction
        that rounds back to it)."""
        block, bn, tile, cores = (getattr(params, k) for k in KNOB_NAMES)
        if None in (block, bn, tile, cores):
            raise BadRequest(f"a search point needs every knob, got {params}")
        return {
            "block_bytes": int(block),
            "buffer_num": int(bn),
            "tile_fraction": min(1.0, (int(tile) + TILE_STEP_BYTES / 2) / self.max_tile_bytes(int(bn))),
            "core_num": int(cores),
        }

    def model_best_points(self, n: int, k: int) -> list[dict[str, float | int]]:
        """The cost model's k best configurations for ``n`` elements (the whole space scored at once)."""
        scored = score_space(self.kernel, self.soc, n)
        picks = [scored.best_index(), *scored.ranked(k)]
        unique = list(dict.fromkeys(picks))[:k]
        return [self.point_of(scored.params(i)) for i in unique]

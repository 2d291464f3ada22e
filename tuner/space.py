"""The search space: the four tiling knobs, valid by construction for one variant.

buffer_num choices are pre-filtered by the queue limit, and tile_bytes is sampled as a
fraction of the largest tile the UB holds at the chosen buffer_num (rounded to whole 512-B
blocks), so TPE never proposes a configuration that overflows UB. ``validate`` still checks
every configuration before it is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from tiling_model import SocProfile, TilingParams
from tiling_model.layout import MAX_BUFFERS_PER_POSITION, kernel_layout
from tiling_model.tiling import default_tile_bytes

BLOCK_CHOICES = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
BUFFER_CHOICES = (1, 2, 3, 4)
TILE_ROUND_BYTES = 512


@dataclass(frozen=True)
class SearchSpace:
    soc: SocProfile
    dtype: str
    reduction: str
    weight: bool

    @property
    def buffer_choices(self) -> tuple[int, ...]:
        layout = kernel_layout(self.dtype, self.reduction, self.weight, "exact")
        worst = max(layout.vecin_queues, layout.vecout_queues)
        return tuple(b for b in BUFFER_CHOICES if worst * b <= MAX_BUFFERS_PER_POSITION)

    def max_tile_bytes(self, buffer_num: int) -> int:
        layout = kernel_layout(self.dtype, self.reduction, self.weight, "exact")
        return layout.max_tile_bytes(self.soc.ub_usable_bytes, buffer_num)

    def tile_from_fraction(self, fraction: float, buffer_num: int) -> int:
        top = self.max_tile_bytes(buffer_num)
        tile = int(fraction * top) // TILE_ROUND_BYTES * TILE_ROUND_BYTES
        return min(max(tile, TILE_ROUND_BYTES), top // TILE_ROUND_BYTES * TILE_ROUND_BYTES)

    def suggest(self, trial: optuna.Trial) -> TilingParams:
        block = trial.suggest_categorical("block_bytes", BLOCK_CHOICES)
        bn = trial.suggest_categorical("buffer_num", self.buffer_choices)
        frac = trial.suggest_float("tile_fraction", 0.0, 1.0)
        cores = trial.suggest_int("core_num", 1, self.soc.aiv_cores)
        return TilingParams(block, bn, self.tile_from_fraction(frac, bn), cores)

    def default_point(self) -> dict[str, float | int]:
        """The seed-default knobs (block 512, 2 buffers, whole-block max tile, all cores)."""
        layout = kernel_layout(self.dtype, self.reduction, self.weight, "exact")
        tile = default_tile_bytes(layout, self.soc, 512, 2)
        return {
            "block_bytes": 512,
            "buffer_num": 2,
            "tile_fraction": min(1.0, (tile + TILE_ROUND_BYTES / 2) / self.max_tile_bytes(2)),
            "core_num": self.soc.aiv_cores,
        }

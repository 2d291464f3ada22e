"""Sizes that teach most: the keys a sweep adds beyond its grid, where its measurements say least.

A device's learned residual (``tiling_model.residual``) prices levels of the realised tiling, and keeps a
factor of 1 at a level no measurement reached, whatever the device does there. A grid of powers of four
never reaches some of them: at such a size every copy is 32-B aligned and every core boundary falls on
512 B, where the sizes between (the sizes requests have) are neither. So a sweep may spend part of its
budget between its keys: among candidate sizes halfway (in log) to the next grid size, at offsets that
realise other alignments, it times those whose likely picks (the device model's few best configurations
there, what the re-fit chooses among) rest most on levels its measurements have seen least. A level weighs
1 / (1 + measurements at it): how a ridge fit's uncertainty about a level falls. Picks are made one at a
time, each counted as measured before the next, so they spread over what is unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from model_tools.calibrate import Measured, case_levels
from tiling_model import SocProfile
from tiling_model.kernels import bce_grad_kernel
from tiling_model.residual import FEATURES, levels
from tiling_model.space import score_space
from tuner.key import StudyKey

#: Candidates around each key: halfway (in log) to the next size of a powers-of-four grid, below and above.
STEPS = (0.5, 2.0)
#: Offsets (elements) from each such point: as it is, odd, 32-B but not 512-B aligned in float32, neither.
OFFSETS = (0, 1, 24, 333)
#: The device model's best configurations at a candidate whose levels count.
LIKELY = 8


#: What a key costs on the device besides its trials, in trials' launches: its final race and the seed
#: default's measurement (measured on a stand-in device of benchmarks/untimed_sizes.py, every trial of a key
#: spent: knob:7's 120 keys at 20 trials took 30.0 K launches, at 12 trials 23.1 K: about 106 + 7.2 per trial;
#: 8 while the race stopped keys early, when 120 keys at 20 trials took 21.8-22.0 K).
KEY_TRIALS = 15


def shared_trials(trials: int, grid_keys: int, extra_keys: int) -> int:
    """Trials per study that keep the device budget (launches) of ``grid_keys`` at ``trials`` when
    ``extra_keys`` are added, each key costing ``KEY_TRIALS`` more (at least 1)."""
    if extra_keys <= 0:
        return trials
    return max(1, int((trials + KEY_TRIALS) * grid_keys / (grid_keys + extra_keys)) - KEY_TRIALS)


def candidates(keys: Sequence[StudyKey]) -> list[StudyKey]:
    """Sizes between the keys' (``STEPS`` x each size, plus each of ``OFFSETS``), within the keys' range of
    sizes, of each key's variant; none that is a key already. In a fixed order (the sweep reproduces)."""
    if not keys:
        return []
    lo, hi = min(k.size for k in keys), max(k.size for k in keys)
    have = {(k.variant, k.size) for k in keys}
    out: dict[tuple[object, int], StudyKey] = {}
    for k in keys:
        for step in STEPS:
            base = round(k.size * step)
            for d in OFFSETS:
                n = base + d
                if lo <= n <= hi and (k.variant, n) not in have:
                    out.setdefault((k.variant, n), StudyKey(k.soc, k.variant, n))
    return sorted(out.values(), key=lambda k: (k.variant.label(), k.size))


def likely_levels(key: StudyKey, profile: SocProfile) -> np.ndarray:
    """(LIKELY, features) residual levels of the model's best configurations at the key's size."""
    kernel = bce_grad_kernel(key.variant, classes=1)
    space = score_space(kernel, profile, key.size, top=LIKELY)
    i = np.asarray(space.ranked(LIKELY))
    return levels(key.size, kernel.elem_bytes, space.block_bytes[i], space.buffer_num[i], space.tile_bytes[i],
                  space.core_num[i])  # fmt: skip


def level_counts(lv: np.ndarray, weight: float = 1.0, into: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """Per feature, the (weighted) count of configurations at each of its levels; added to ``into``."""
    counts = into if into is not None else [np.zeros(size) for _, size in FEATURES]
    for j in range(len(FEATURES)):
        np.add.at(counts[j], lv[:, j], weight)
    return counts


def novelty(lv: np.ndarray, counts: list[np.ndarray]) -> float:
    """How little the counts say about these configurations: the mean over them of each feature's
    1 / (1 + measurements at its level), summed over features."""
    return float(np.mean(sum(1.0 / (1.0 + counts[j][lv[:, j]]) for j in range(len(FEATURES)))))


@dataclass(frozen=True)
class Choice:
    key: StudyKey
    novelty: float  # at the time it was chosen (what the measurements and the earlier choices left unknown)


def choose(keys: Sequence[StudyKey], measured: Sequence[Measured], profile: SocProfile, count: int,
           trials: int) -> list[Choice]:  # fmt: skip
    """The ``count`` candidates between ``keys`` that teach most, one at a time: each the most novel given
    ``measured`` (the sweep's measurements so far) and the ones chosen before it (each counted as ``trials``
    measurements spread over its likely configurations). Ties go to the first candidate."""
    pool = [(key, likely_levels(key, profile)) for key in candidates(keys)]
    counts = level_counts(case_levels(measured)) if measured else level_counts(np.zeros((0, len(FEATURES)), int))
    chosen: list[Choice] = []
    for _ in range(min(count, len(pool))):
        scores = [novelty(lv, counts) for _, lv in pool]
        best = int(np.argmax(scores))
        key, lv = pool.pop(best)
        chosen.append(Choice(key, scores[best]))
        level_counts(lv, trials / len(lv), counts)
    return chosen

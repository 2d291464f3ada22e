"""What a trial of a study stores: its configuration and its measurement, one user attribute each.

Optuna's RDB storage writes every user attribute of a trial in statements of its own (a lookup of the trial,
of the attribute, then an insert; on a live trial each in its own commit), so a trial that kept its four knobs,
its samples, their summary and the model's predictions in eleven attributes cost a sweep most of its host time
in the storage (``benchmarks/trial_writes.py``). A trial now keeps two: ``config`` (the four knobs, written
before a live trial claims its configuration, so another worker reads all of it or none) and ``measured``.
Readers take the older form too (one attribute per knob and per figure), so a sweep resumes a storage written
before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from tiling_model.tiling import KNOB_NAMES
from tuner.protocol import Measurement

#: The configuration: [block_bytes, buffer_num, tile_bytes, core_num] (KNOB_NAMES' order).
CONFIG_ATTR = "config"
#: The measurement: its samples, how many the outlier rule kept, their median and IQR, and what the shipped
#: profile (and, in a race, the device model) predicted.
MEASURED_ATTR = "measured"


@dataclass(frozen=True)
class StoredMeasurement:
    """A trial's measurement as the storage holds it."""

    samples: list[float]
    kept: int
    median_us: float
    iqr_us: float
    predicted_us: float
    predicted_device_us: float | None = None


def measured_attr(m: Measurement, predicted_us: float, predicted_device_us: float | None = None) -> dict[str, object]:
    """The ``measured`` attribute of a trial that timed ``m``."""
    out = m.as_attrs() | {"predicted_us": predicted_us}
    if predicted_device_us is not None:
        out["predicted_device_us"] = predicted_device_us
    return out


def trial_attrs(knobs: tuple[int, ...] | list[int], m: Measurement, predicted_us: float,
                predicted_device_us: float | None = None) -> dict[str, object]:  # fmt: skip
    """Both attributes of a finished trial (``optuna.trial.create_trial``'s ``user_attrs``)."""
    return {CONFIG_ATTR: list(knobs), MEASURED_ATTR: measured_attr(m, predicted_us, predicted_device_us)}


def knobs_of(t: optuna.trial.FrozenTrial) -> tuple[int, int, int, int] | None:
    """The trial's configuration (KNOB_NAMES' order), or None where it has written none yet. The older form (a
    knob an attribute) is read from completed trials only: a live trial wrote those one at a time."""
    a = t.user_attrs
    if CONFIG_ATTR in a:
        block, bn, tile, cores = (int(v) for v in a[CONFIG_ATTR])
        return block, bn, tile, cores
    if t.state == TrialState.COMPLETE and all(k in a for k in KNOB_NAMES):
        block, bn, tile, cores = (int(a[k]) for k in KNOB_NAMES)
        return block, bn, tile, cores
    return None


def measurement_of(t: optuna.trial.FrozenTrial) -> StoredMeasurement | None:
    """The trial's measurement, or None where it holds none (a failed trial, a duplicate, a live one)."""
    a: Mapping[str, Any] = t.user_attrs
    doc = a.get(MEASURED_ATTR)
    if not isinstance(doc, Mapping):
        doc = a  # the older form: each figure its own attribute
    if "samples" not in doc or "median_us" not in doc:
        return None
    device = doc.get("predicted_device_us")
    return StoredMeasurement(
        samples=[float(x) for x in doc["samples"]],
        kept=int(doc.get("kept", len(doc["samples"]))),
        median_us=float(doc["median_us"]),
        iqr_us=float(doc.get("iqr_us", 0.0)),
        predicted_us=float(doc.get("predicted_us", "nan")),
        predicted_device_us=None if device is None else float(device),
    )

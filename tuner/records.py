"""Measurement records as JSON lines: one per measured trial, with the model's prediction beside
it, in the format ``python -m model_tools calibrate --data`` reads (so NPU runs fit the model again)."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from pathlib import Path

import numpy as np

from tiling_model import TilingData
from tuner.key import StudyKey
from tuner.protocol import Measurement


class RecordLog:
    def __init__(self, path: Path) -> None:
        if path.parent and not path.parent.exists():
            raise ValueError(f"records directory {path.parent} does not exist")
        self.path = path
        self._lock = threading.Lock()

    def write(
        self,
        key: StudyKey,
        backend: str,
        t: TilingData,
        m: Measurement | None,
        predicted_us: float,
        predicted_device_us: float | None = None,
        raced: list[float] | None = None,
        again: bool = False,
    ) -> None:
        """One measured configuration: what the shipped model predicted, what the device model of the
        moment predicted (a timed sweep's), and what was measured. ``raced``: every sample the race took
        of it (its first measurement's and its rounds'), which the sweep's learner fits to as their median:
        the record says the same (then ``m``, its first measurement, may be None). ``again``: a second
        look's race sampled a configuration recorded before: this record, with all of its samples,
        supersedes that one (``model_tools.calibrate.record_documents``)."""
        if raced:
            samples = list(raced)
            median, iqr = float(np.median(samples)), float(np.subtract(*np.percentile(samples, [75, 25])))
        elif m is not None:
            samples, median, iqr = list(m.samples), m.median_us, m.iqr_us
        else:
            raise ValueError("a record needs its measurement or its raced samples")
        rec: dict[str, object] = {
            "soc": key.soc,
            "backend": backend,
            "key": key.study_name(backend),
            "kernel": {"kind": "bce_grad", **asdict(key.variant)},
            "shape": list(t.shape),
            "weight_period": t.fields.weightPeriod or None,
            "params": t.params.as_dict(),
            "measured_us": median,
            "iqr_us": iqr,
            "samples": samples,
            "predicted_us": predicted_us,
            "predicted_device_us": predicted_device_us,
            "l2": "cold",
        }
        if again:
            rec["again"] = True
        line = json.dumps(rec) + "\n"
        with self._lock, self.path.open("a") as f:  # one write per line: safe to append from several workers
            f.write(line)

"""Measurement records as JSON lines: one per measured trial, with the model's prediction beside
it, in the format ``python -m tiling_model calibrate --data`` reads (so NPU runs refit the model)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tiling_model import TilingData
from tuner.protocol import Measurement

if TYPE_CHECKING:
    from tuner.study import StudyKey


class RecordLog:
    def __init__(self, path: Path) -> None:
        if path.parent and not path.parent.exists():
            raise ValueError(f"records directory {path.parent} does not exist")
        self.path = path
        self._lock = threading.Lock()

    def write(self, key: StudyKey, backend: str, t: TilingData, m: Measurement, predicted_us: float) -> None:
        rec = {
            "soc": key.soc,
            "backend": backend,
            "kernel": {
                "kind": "bce_grad",
                "dtype": key.dtype,
                "reduction": key.reduction,
                "weight": key.weight,
                "pos_weight": key.pos_weight,
                "wrt": key.wrt,
            },
            "shape": list(t.shape),
            "params": t.params.as_dict(),
            "measured_us": m.median_us,
            "iqr_us": m.iqr_us,
            "samples": list(m.samples),
            "predicted_us": predicted_us,
            "l2": "cold",
        }
        line = json.dumps(rec) + "\n"
        with self._lock, self.path.open("a") as f:  # one write per line: safe to append from several workers
            f.write(line)

"""tuner.replay: records that are not JSON are named by file and line (each line is its own document)."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_tools.calibrate import CalibrationError
from tuner.replay import replay_device


def test_a_bad_record_is_named_by_its_own_line(tmp_path: Path) -> None:
    records = tmp_path / "runs.jsonl"
    records.write_text('{"soc": "Ascend910B2"}\n\n{"soc": "Ascend910B2"}\n{"soc": broken\n')
    with pytest.raises(CalibrationError, match=r"runs\.jsonl:4: not valid JSON"):
        replay_device([records])
    with pytest.raises(CalibrationError, match="No such file"):
        replay_device([tmp_path / "missing.jsonl"])

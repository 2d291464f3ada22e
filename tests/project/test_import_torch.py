"""`import torch` works in the environment make test / make dev build, in either order with bcetune, with or
without CANN's set_env.sh (ASCEND_HOME_PATH): torch_npu is not installed there (its device autoload would
make torch's own import fail on a host without CANN's libraries)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ORDERS = {
    "torch alone": "import torch; torch.ones(2).sum()",
    "torch, then bcetune.torch": "import torch; from bcetune.torch import BCEWithLogitsLoss",
    "bcetune.torch, then torch": "from bcetune.torch import BCEWithLogitsLoss; import torch",
}


@pytest.mark.parametrize("cann", [False, True], ids=["no CANN", "ASCEND_HOME_PATH set"])
@pytest.mark.parametrize("code", list(ORDERS.values()), ids=list(ORDERS))
def test_import_torch_works_in_any_order(code: str, cann: bool, tmp_path: os.PathLike[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}  # as a user's shell
    if cann:
        env["ASCEND_HOME_PATH"] = str(tmp_path)  # set_env.sh sourced (an empty toolkit: no NPU here)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert run.returncode == 0, run.stderr[-2000:]

"""bcetune: tilings for the Ascend C BinaryCrossEntropyGrad kernel, tuned, served and used from PyTorch.

The parts: ``tiling_model`` (host tiling, rules, cost model), ``kernel`` (the Ascend C sources, the CPU
twin, the NPU runner, the PyTorch operator), ``tuner`` (sweeps on an NPU or the model), ``service``
(``POST /tiling``). This package is the front door for PyTorch users: ``bcetune.torch``.

An installed torch_npu registers itself as a torch device backend, and on a host without CANN that
makes a plain ``import torch`` fail (its libraries are missing). Imported before torch on such a host
(``ASCEND_HOME_PATH`` unset: CANN's set_env.sh not sourced), bcetune sets
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` so torch loads for the CPU; with CANN sourced it changes nothing.
"""

from __future__ import annotations

import importlib.util
import os
import sys

if "torch" not in sys.modules and not os.environ.get("ASCEND_HOME_PATH"):
    if importlib.util.find_spec("torch_npu") is not None:
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

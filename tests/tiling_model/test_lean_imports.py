"""tiling_model is the ground floor: ``import tiling_model``, the model's CLI (``model_tools``) and the
service's app load no plotting, no calibration fit and no tuner (a ``make run`` install has none of them:
scipy, matplotlib and optuna are blocked here as if absent)."""

from __future__ import annotations

import subprocess
import sys

import pytest

BLOCK = """
import builtins, sys
real = builtins.__import__
def guard(name, *a, **k):
    if name.split('.')[0] in ('scipy', 'matplotlib', 'optuna', 'numba'):
        raise ImportError('not installed in a serving-only install: ' + name)
    return real(name, *a, **k)
builtins.__import__ = guard
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True, timeout=120)


def test_the_guard_does_block() -> None:
    r = run("import scipy.optimize")
    assert r.returncode != 0 and "not installed in a serving-only install" in r.stderr


@pytest.mark.parametrize(
    "code",
    [
        "import tiling_model; tiling_model.predict",
        "import service.app; service.app.create_app",
        "import sys, runpy; sys.argv = ['model_tools', 'tiling', '--shape', '1024,1024', '--dtype', 'float16',"
        " '--reduction', 'mean']; runpy.run_module('model_tools', run_name='__main__')",
        "import sys, runpy; sys.argv = ['model_tools', 'predict', '--shape', '4096', '--dtype', 'float32', '--best'];"
        " runpy.run_module('model_tools', run_name='__main__')",
    ],
    ids=["import", "service-app", "cli-tiling", "cli-predict"],
)
def test_serving_paths_need_no_plotting_fitting_or_tuning(code: str) -> None:
    r = run(code)
    assert r.returncode == 0, r.stderr[-2000:]


def test_import_tiling_model_loads_nothing_above_the_model() -> None:
    """Not only blocked when absent: with everything installed, nothing of it is loaded either."""
    code = (
        "import sys, tiling_model; tiling_model.predict; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'scipy', 'matplotlib', 'optuna', 'torch', 'model_tools', 'kernel', 'tuner', 'service'}))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]", r.stdout

"""A command that needs an optional install says which, in one line: a user of the serving install
(`make run`, `pip install -e .`) who runs the tuner, calibration or bcetune.torch is told the extra's
name and the pip line, not shown a ModuleNotFoundError. The missing module is simulated by a None in
sys.modules (what `import` then refuses with ModuleNotFoundError, as for a module not installed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tiling_model.extras import EXTRA_OF, missing_extra


def run_without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys; sys.modules[{module!r}] = None; sys.argv = ['x', *sys.argv[1:]]\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "module,code,extra",
    [
        ("optuna", "import runpy; sys.argv[1:] = ['sweep', '--help']; runpy.run_module('tuner', run_name='__main__')",
         "tune"),
        ("scipy", "import runpy; sys.argv[1:] = ['calibrate', '--data', 'x.jsonl']; "
         "runpy.run_module('model_tools', run_name='__main__')", "tune"),
        ("torch", "import bcetune.torch", "torch"),
    ],
)  # fmt: skip
def test_a_command_missing_its_extra_names_it_in_one_line(module: str, code: str, extra: str) -> None:
    r = run_without(module, code)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert f"'{extra}' extra: pip install -e '.[{extra}]'" in last, r.stderr[-2000:]
    if "runpy" in code:  # a command: that line alone, exit 2
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_module_no_extra_brings_is_left_to_its_traceback() -> None:
    assert missing_extra(ModuleNotFoundError("x", name="yaml"), "cmd") is None
    assert set(EXTRA_OF.values()) <= {"tune", "torch", "npu"}


def test_each_module_is_in_the_extra_it_is_said_to_come_with() -> None:
    import re
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for module, extra in EXTRA_OF.items():
        names = {re.split(r"[<>=;\[ ]", d, maxsplit=1)[0].replace("-", "_") for d in extras[extra]}
        assert module in names, (module, extra, names)

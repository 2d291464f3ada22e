"""The README's first screen and its five-minute tour, run as written: the blocks marked
``<!-- tour -->`` go through bash from the repository root, and the first-screen answer is what the
service answers."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app

pytestmark = pytest.mark.slow  # the README's tour, run as written

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def tour_blocks() -> list[str]:
    return re.findall(r"<!-- tour -->\n```sh\n(.*?)```", README, re.S)


def test_the_readme_has_a_tour_of_five_steps() -> None:
    assert len(tour_blocks()) == 5


def test_the_first_screen_answer_is_the_services() -> None:
    request = re.search(r"-d '(\{.*?\})'", README)
    answer = re.search(r"```json\n(.*?)```", README, re.S)
    assert request and answer
    shown = json.loads(answer.group(1))
    with TestClient(create_app()) as client:
        got = client.post("/tiling", json=json.loads(request.group(1))).json()
    for key, value in shown.items():
        if isinstance(value, dict):
            assert {k: got[key][k] for k in value if k != "..."} == {k: v for k, v in value.items() if k != "..."}
        elif key == "tiling_b64":
            assert got[key].startswith(value.rstrip("."))
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("step", range(5))
def test_tour_step_runs_as_written(step: int, tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "activate").exists():
        pytest.skip("the tour activates .venv, which make test creates")
    if shutil.which("curl") is None:
        pytest.skip("the tour uses curl")
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", tour_blocks()[step]],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a user's shell has it (the test session's TORCH_DEVICE_BACKEND_AUTOLOAD=0 is not theirs)
        env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TORCH_DEVICE_BACKEND_AUTOLOAD")},
        start_new_session=True,  # a step that leaves a server behind is killed with its group
    )
    try:
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    r = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    expected = {
        0: ["after 20 steps; Ascend910B2 float32/mean/nw/logit/pw_last_dim/fused n=2560: ", "from the Ascend910B2 "],
        1: ['"block_bytes"', '"core_num"'],
        2: ["ub_overflow", "out_of_bounds", "violations: none"],
        3: ["max |z - (p - y)| = 0.0"],
        4: ["speedup over the seed default: 4 entries, min 1.000x"],
    }[step]
    for text in expected:
        assert text in r.stdout, r.stdout


def test_relative_links_in_the_documents_resolve() -> None:
    """The README points into docs/; a moved page must not leave a dead link behind."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")]
    dead = [
        f"{page.relative_to(ROOT)} -> {link}"
        for page in pages
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
        if not link.startswith("http") and not (page.parent / link).exists()
    ]
    assert dead == []

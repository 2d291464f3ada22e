"""Every shell block of the README, the manual and CONTRIBUTING says whether it runs here, and the ones
that do run as written.

A fenced ``sh`` block is preceded by one of ``<!-- tour -->`` (the README's tour, run by
test_readme_tour.py), ``<!-- run -->`` (run here, from a scratch directory beside the clone's
``.venv``, in a user's environment) or ``<!-- not run: why -->`` (an NPU, a CANN host, a server
that runs until stopped, a long job: said in the text). The manual's first answer is the service's."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

pytestmark = pytest.mark.slow  # the docs' shell blocks, run as written

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/manual.md", "CONTRIBUTING.md")
BLOCK = re.compile(r"^(?P<marker><!--[^\n]*-->\n)?```sh\n(?P<body>.*?)^```", re.S | re.M)
MARKER = re.compile(r"<!-- (tour|run|not run: .+) -->\n")


def blocks(doc: str) -> list[tuple[str, str]]:
    """(marker, body) of every shell block of ``doc``; marker '' where there is none."""
    text = (ROOT / doc).read_text()
    return [(m.group("marker") or "", m.group("body")) for m in BLOCK.finditer(text)]


def runnable() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        for i, (marker, body) in enumerate(blocks(doc)):
            if marker == "<!-- run -->\n":
                out.append((doc, i, body))
    return out


def test_every_shell_block_says_whether_it_runs() -> None:
    for doc in DOCS:
        found = blocks(doc)
        assert found, doc
        unmarked = [body.splitlines()[0] for marker, body in found if not MARKER.fullmatch(marker)]
        assert not unmarked, f"{doc}: shell blocks without a run marker: {unmarked}"
        reasons = [m for m, _ in found if m.startswith("<!-- not run:")]
        assert all(len(m) > len("<!-- not run:  -->\n") + 10 for m in reasons), reasons  # a reason, not a stub
    assert len(runnable()) >= 4


@pytest.mark.parametrize(("doc", "index", "body"), runnable(), ids=[f"{d}#{i}" for d, i, _ in runnable()])
def test_shell_block_runs_as_written(doc: str, index: int, body: str, tmp_path: Path) -> None:
    venv = ROOT / ".venv"
    if not (venv / "bin" / "python").exists():
        pytest.skip("the blocks use .venv, which make test creates")
    (tmp_path / ".venv").symlink_to(venv)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", body], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    shown = f"{doc} block {index}:\n{body}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
    assert proc.returncode == 0, shown


def test_the_manuals_first_answer_is_the_services() -> None:
    from service.app import create_app

    text = (ROOT / "docs" / "manual.md").read_text()
    request = re.search(r"-d '(\{.*?\})'", text)
    answer = re.search(r"```json\n(.*?)```", text, re.S)
    assert request and answer
    shown = json.loads(answer.group(1))
    with TestClient(create_app()) as client:
        got = client.post("/tiling", json=json.loads(request.group(1))).json()
    assert set(shown) == set(got), set(shown) ^ set(got)  # every field, none left out
    for key, value in shown.items():
        if key == "provenance":
            assert {k: got[key][k] for k in value} == value
        else:
            assert got[key] == value, key

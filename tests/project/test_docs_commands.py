"""Every shell block of the README, the manual and CONTRIBUTING says whether it runs here, and the ones
that do run as written.

A fenced ``sh`` block is preceded by one of ``<!-- tour -->`` (the README's tour, run by
test_readme_tour.py), ``<!-- run -->`` (run here, from the clone's root as a user would, in a
user's environment; the checkout's git status the same after it) or ``<!-- not run: why -->`` (an
NPU, a CANN host, a server that runs until stopped, a long job: said in the text). The manual's first
answer is the service's; a block's output the doc shows is what it prints now."""

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
#: the output a doc shows right after a shell block (a plain fence; "..." stands for lines left out)
SHOWN = re.compile(r"\n\n```\n(?P<shown>.*?)^```", re.S | re.M)
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


def shown_output(doc: str, index: int) -> list[str]:
    """The lines a doc shows as block ``index``'s output ("..." lines aside); [] where it shows none."""
    text = (ROOT / doc).read_text()
    block = list(BLOCK.finditer(text))[index]
    shown = SHOWN.match(text, block.end())
    if shown is None:
        return []
    return [x for x in shown.group("shown").splitlines() if x.strip() != "..."]


def test_every_shell_block_says_whether_it_runs() -> None:
    for doc in DOCS:
        found = blocks(doc)
        assert found, doc
        unmarked = [body.splitlines()[0] for marker, body in found if not MARKER.fullmatch(marker)]
        assert not unmarked, f"{doc}: shell blocks without a run marker: {unmarked}"
        reasons = [m for m, _ in found if m.startswith("<!-- not run:")]
        assert all(len(m) > len("<!-- not run:  -->\n") + 10 for m in reasons), reasons  # a reason, not a stub
    assert len(runnable()) >= 4


#: what running code leaves in any checkout (byte-code, tool caches, the environment itself)
CACHES = ("__pycache__/", ".pytest_cache/", ".ruff_cache/", ".mypy_cache/", ".hypothesis/", ".venv/", ".bcetune/")


def checkout_state() -> list[str]:
    """The checkout's changed, untracked and ignored paths (git status), caches aside: what a command run
    from the clone's root must leave as it found it."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return sorted(x for x in out.splitlines() if not any(c in x for c in CACHES))


@pytest.mark.parametrize(("doc", "index", "body"), runnable(), ids=[f"{d}#{i}" for d, i, _ in runnable()])
def test_shell_block_runs_as_written_and_leaves_the_checkout_as_it_was(doc: str, index: int, body: str) -> None:
    """Run from the clone's root, as a user would; whatever a block writes goes to a scratch directory it
    names (mktemp), never into the checkout, tracked or ignored (a sweep's database left there would be
    resumed by the next sweep)."""
    venv = ROOT / ".venv"
    if not (venv / "bin" / "python").exists():
        pytest.skip("the blocks use .venv, which make test creates")
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to compare the checkout against")
    before = checkout_state()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", body], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    shown = f"{doc} block {index}:\n{body}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
    assert proc.returncode == 0, shown
    missing = [x for x in shown_output(doc, index) if x not in stdout.splitlines()]
    assert not missing, f"{doc} block {index} shows output the command no longer prints: {missing}\n{shown}"
    after = checkout_state()
    assert after == before, f"{doc} block {index} changed the checkout: {sorted(set(after) ^ set(before))}"


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


def test_figures_shown_twice_are_one_measurement() -> None:
    """The README's regret table is the benchmark doc's output (make bench-regret writes what the doc
    shows), line for line; every "schema N" the manual names is the tables' current version."""
    from tiling_model.tables import SCHEMA_VERSION

    def regret_rows(text: str) -> list[str]:
        return [x.strip() for x in text.splitlines() if re.match(r"\s*Ascend\d+\w*\s+(service|build|nearest)\s", x)]

    readme = regret_rows((ROOT / "README.md").read_text())
    bench = regret_rows((ROOT / "docs" / "benchmarks" / "build-tiling.md").read_text())
    assert readme and readme == bench[: len(readme)], "README's regret table is not build-tiling.md's first"
    manual = (ROOT / "docs" / "manual.md").read_text()
    named = {int(v) for v in re.findall(r"\bschema (\d+)\b", manual)}
    assert named == {SCHEMA_VERSION}, named

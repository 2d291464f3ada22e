"""``.ci/with-services.sh`` (what ``make test`` and ``.ci/run`` run the suite under): every run has a
directory of its own, two runs at once do not collide, and a run that is interrupted or killed stops
the command and every server it started and removes its directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "with-services.sh"
#: What the command under the script writes once it runs: its run directory and PostgreSQL URL.
REPORT = 'echo "$BCETUNE_RUN_DIR ${BCETUNE_TEST_POSTGRES:-none}" > "$OUT"; exec sleep 600'


def start(out: Path, services: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BCETUNE_TEST_")}
    # no Docker daemon or Chromium here (minutes of debootstrap): a set BCETUNE_TEST_DOCKER is used as is
    env |= {"OUT": str(out), "BCETUNE_SERVICES": services, "BCETUNE_TEST_DOCKER": "unused", "CI": ""}
    # as from a terminal, where Ctrl-C reaches it: with SIGINT at its default even when this suite runs
    # with it ignored (a background job of a shell, as under with-services.sh itself)
    return subprocess.Popen(
        ["env", "--default-signal=INT", "bash", str(SCRIPT), "bash", "-c", REPORT], env=env, cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


def report(out: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> tuple[Path, str]:
    deadline = time.monotonic() + timeout
    while not (out.exists() and out.read_text().strip()):
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the command under with-services.sh never ran"
        time.sleep(0.1)
    run_dir, url = out.read_text().split()
    return Path(run_dir), url


def postgres_pid(run_dir: Path) -> int:
    return int((run_dir / "postgres" / "data" / "postmaster.pid").read_text().split()[0])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def stop(proc: subprocess.Popen[bytes], sig: int) -> int:
    os.kill(proc.pid, sig)  # the script alone, as a kill or a Ctrl-C in its terminal reaches it
    try:
        return proc.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_stops_its_command_and_removes_its_directory(tmp_path: Path, sig: int, code: int) -> None:
    proc = start(tmp_path / "out", "none")
    run_dir, url = report(tmp_path / "out", proc)
    assert url == "none" and run_dir.is_dir() and run_dir.name.startswith("bcetune-run.")
    sleeper = int(subprocess.run(["pgrep", "-s", str(proc.pid), "sleep"], capture_output=True, text=True).stdout)
    assert stop(proc, sig) == code
    assert not run_dir.exists()
    assert not alive(sleeper)


@pytest.mark.database
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("pg_ctlcluster") is None and not list(Path("/usr/lib/postgresql").glob("*")),
    reason="starting a PostgreSQL needs root and Debian's postgresql package",
)
def test_two_runs_at_once_get_their_own_servers_and_a_kill_leaves_none_behind(tmp_path: Path) -> None:
    procs = [start(tmp_path / f"out{i}", "auto") for i in range(2)]
    try:
        (dir_a, url_a), (dir_b, url_b) = [report(tmp_path / f"out{i}", p) for i, p in enumerate(procs)]
        assert dir_a != dir_b and url_a != url_b and "none" not in (url_a, url_b)
        pids = [postgres_pid(d) for d in (dir_a, dir_b)]
        assert all(alive(pid) for pid in pids)
        assert stop(procs[0], signal.SIGTERM) == 143  # one killed mid-run: its server goes, the other's stays
        assert not alive(pids[0]) and not dir_a.exists()
        assert alive(pids[1]) and dir_b.is_dir()
        assert stop(procs[1], signal.SIGINT) == 130
        assert not alive(pids[1]) and not dir_b.exists()
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p, signal.SIGTERM)


def test_the_command_can_be_interrupted_even_when_the_script_was_started_in_the_background(tmp_path: Path) -> None:
    """bash starts a background job with SIGINT ignored, and that survives exec: the suite, run under
    the script, once passed that on to every with-services.sh it started, which then could not be
    interrupted (CI's failure of the SIGINT cases above). The command must get SIGINT back."""
    out = tmp_path / "sigign"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BCETUNE_TEST_")}
    env |= {"OUT": str(out), "BCETUNE_SERVICES": "none", "BCETUNE_TEST_DOCKER": "unused", "CI": ""}
    subprocess.run(
        ["bash", "-c", 'bash "$0" bash -c "grep SigIgn /proc/\\$\\$/status > $OUT" & wait', str(SCRIPT)],
        env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    ignored = int(out.read_text().split()[1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1)), f"SIGINT ignored by the command: SigIgn {ignored:#x}"

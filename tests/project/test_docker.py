"""The container, built and run as an operator would: the project's Dockerfile on a base image made
from Debian packages (.ci/docker-start.sh: debootstrap, no registry), against a private Docker daemon.

`make test` (through .ci/with-services.sh) starts the daemon and builds the base as root and sets
BCETUNE_TEST_DOCKER (its DOCKER_HOST); without it every test here skips and says why. `make docker-test`
runs these tests alone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
HOST = os.environ.get("BCETUNE_TEST_DOCKER")
BASE = os.environ.get("BCETUNE_DOCKER_BASE", "bcetune-base:bookworm")
IMAGE = "bcetune:ci"
README_REQUEST = {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"}
pytestmark = [
    pytest.mark.container,
    pytest.mark.skipif(
        not HOST,
        reason="BCETUNE_TEST_DOCKER not set (make test starts Docker as root where docker.io and debootstrap are)",
    ),
]


def docker(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    exe = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")
    env = dict(os.environ, DOCKER_HOST=HOST or "", DOCKER_BUILDKIT="0")
    return subprocess.run([exe, *args], capture_output=True, text=True, env=env, check=check, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, ok: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():  # type: ignore[operator]
                return
        except (httpx.TransportError, subprocess.CalledProcessError):
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def image() -> str:
    start = time.monotonic()
    r = docker("build", "--network", "host", "--build-arg", f"PYTHON_IMAGE={BASE}", "-t", IMAGE, str(ROOT), check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    size = int(docker("image", "inspect", "-f", "{{.Size}}", IMAGE).stdout)
    print(f"\nimage {IMAGE}: built in {time.monotonic() - start:.1f} s, {size / 1e6:.0f} MB")
    return IMAGE


class Container:
    def __init__(self, image: str, *opts: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        envs = [x for k, v in (env or {}).items() for x in ("-e", f"{k}={v}")]
        self.id = docker("run", "-d", "-p", f"127.0.0.1:{self.port}:8000", *envs, *opts, image).stdout.strip()
        self.url = f"http://127.0.0.1:{self.port}"
        wait_until("the container's /healthz", lambda: httpx.get(self.url + "/healthz", timeout=1).status_code == 200)

    def post(self, body: object) -> httpx.Response:
        return httpx.post(self.url + "/tiling", json=body, timeout=30)

    def remove(self) -> None:
        docker("rm", "-f", self.id, check=False)


@pytest.fixture()
def running(image: str) -> Iterator[Container]:
    c = Container(image, "--health-interval", "1s", "--health-start-period", "1s")
    yield c
    c.remove()


def local_answer(body: dict) -> dict:
    """What `make run` answers: the same service on the shipped tables, from this checkout."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "service", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until("the local service", lambda: httpx.get(url + "/healthz", timeout=1).status_code == 200)
        answer: dict = httpx.post(url + "/tiling", json=body, timeout=30).json()
        return answer
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_image_answers_the_readme_request_as_make_run_does(running: Container) -> None:
    r = running.post(README_REQUEST)
    assert r.status_code == 200, r.text
    assert r.json() == local_answer(README_REQUEST)


def test_healthcheck_turns_healthy_and_the_service_runs_as_non_root(running: Container) -> None:
    wait_until(
        "HEALTHCHECK healthy",
        lambda: docker("inspect", "-f", "{{.State.Health.Status}}", running.id).stdout.strip() == "healthy",
    )  # noqa: E501
    assert docker("exec", running.id, "id", "-u").stdout.strip() == "10001"
    assert docker("inspect", "-f", "{{.Config.User}}", running.id).stdout.strip() == "10001"


def test_docker_stop_ends_it_within_the_grace_period(image: str) -> None:
    c = Container(image)
    start = time.monotonic()
    docker("stop", "-t", "10", c.id)
    took = time.monotonic() - start
    state = json.loads(docker("inspect", "-f", "{{json .State}}", c.id).stdout)
    logs = docker("logs", c.id).stderr
    c.remove()
    assert took < 10 and state["ExitCode"] == 0, (took, state)  # SIGTERM handled: no SIGKILL (137)
    assert "Finished server process" in logs


def test_a_read_only_root_file_system_with_a_tmpfs_works(image: str) -> None:
    c = Container(image, "--read-only", "--tmpfs", "/tmp")
    try:
        assert c.post(README_REQUEST).status_code == 200
        # the explorer's pictures too: matplotlib finds no writable home and caches in the tmpfs
        r = httpx.post(c.url + "/tiling/plot/landscape?format=png", json=README_REQUEST, timeout=60)
        assert r.status_code == 200 and r.content.startswith(b"\x89PNG"), r.text[:500]
        assert httpx.get(c.url + "/explorer", timeout=10).status_code == 200
    finally:
        c.remove()


def test_a_mounted_tables_directory_is_served_and_hot_reloaded(image: str, tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    tables.mkdir()
    doc = json.loads((ROOT / "service" / "tables" / "Ascend910B2.json").read_text())
    readme_key = {"dtype": "float16", "reduction": "mean", "size": 1 << 20, "weight": "full", "pos_weight": "none"}
    entry = next(
        e
        for e in doc["entries"]
        if all(e[k] == v for k, v in readme_key.items()) and e["wrt"] == "logit" and "mode" not in e
    )  # the BinaryCrossEntropyGrad entry, not the fused one
    (tables / "Ascend910B2.json").write_text(json.dumps(doc))
    tables.chmod(0o755)
    (tables / "Ascend910B2.json").chmod(0o644)
    c = Container(
        image, "-v", f"{tables}:/tables:ro", env={"BCETUNE_TABLES": "/tables", "BCETUNE_RELOAD_INTERVAL": "0.5"}
    )
    try:
        assert c.post(README_REQUEST).json()["params"] == entry["params"]
        [info] = httpx.get(c.url + "/tables").json()["tables"]
        assert info["soc"] == "Ascend910B2" and info["path"] == "Ascend910B2.json"
        entry["params"] = {"block_bytes": 2048, "buffer_num": 1, "tile_bytes": 16384, "core_num": 32}
        tmp = tables / ".new.json"
        tmp.write_text(json.dumps(doc))
        tmp.chmod(0o644)
        tmp.replace(tables / "Ascend910B2.json")  # atomic, as the tuner writes tables
        wait_until("the reload", lambda: c.post(README_REQUEST).json()["params"] == entry["params"])
        assert httpx.get(c.url + "/tables").json()["reloads"] == 1
    finally:
        c.remove()


def test_the_runtime_image_holds_what_serving_needs_only(image: str) -> None:
    code = (
        "import importlib.util as u, json; "
        "print(json.dumps({m: u.find_spec(m) is not None for m in "
        "('fastapi', 'uvicorn', 'numpy', 'optuna', 'scipy', 'matplotlib', 'torch', 'pytest', 'ml_dtypes')}))"
    )
    found = json.loads(docker("run", "--rm", "--entrypoint", "python", image, "-c", code).stdout)
    assert found == {"fastapi": True, "uvicorn": True, "numpy": True, "optuna": False, "scipy": False,
                     "matplotlib": True, "torch": False, "pytest": False, "ml_dtypes": False}  # fmt: skip
    # matplotlib draws the explorer's pictures (POST /tiling/plot); the tuner, the twin and the tests stay out

"""The service over real HTTP: a uvicorn process per fixture, httpx as the client."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tiling_model import TilingParams, compute_tiling, load_soc, predict, validate
from tiling_model.tables import TableEntry, TuningTable, kernel_source_hash, write_table

GOOD = {"block_bytes": 1024, "buffer_num": 2, "tile_bytes": 8192, "core_num": 40}
BROKEN = {"block_bytes": 512, "buffer_num": 2, "tile_bytes": 65536, "core_num": 48}  # overflows UB


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, tables: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service", "--port", str(self.port), "--tables", str(tables)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.proc.stdout.read()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("service did not come up")

    def stop(self) -> str:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("tables")
    table = TuningTable(
        "Ascend910B2",
        load_soc("Ascend910B2").profile_hash,
        kernel_source_hash(),
        "model",
        "2026-11-30T00:00:00+00:00",
        10,
        (
            TableEntry("float16", "mean", True, "none", "logit", 1 << 20, GOOD, 8.0, 9.0, 10),
            TableEntry("float32", "none", True, "none", "logit", 1 << 20, BROKEN, 8.0, 9.0, 10),
        ),
    )
    write_table(table, d / "Ascend910B2.json")
    srv = Server(d)
    yield srv
    srv.log = srv.stop()


def post(server: Server, body: object) -> httpx.Response:
    return httpx.post(server.url + "/tiling", json=body, timeout=10)


def test_healthz_and_docs(server: Server) -> None:
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(server.url + "/docs").status_code == 200
    spec = httpx.get(server.url + "/openapi.json").json()
    assert "/tiling" in spec["paths"]


def test_table_entry_is_served_with_its_exact_bytes(server: Server) -> None:
    r = post(server, {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["source"] == "table"
    assert doc["params"] == GOOD
    t = compute_tiling([1 << 20], "float16", "mean", TilingParams(**GOOD))
    assert doc["tiling"] == t.field_dict() and list(doc["tiling"]) == list(t.field_dict())
    assert base64.b64decode(doc["tiling_b64"]) == t.to_bytes()
    assert (doc["block_dim"], doc["tiling_key"]) == (t.block_dim, t.tiling_key)
    assert doc["predicted_us"] == pytest.approx(predict(t), abs=1e-4)
    assert doc["provenance"]["backend"] == "model" and doc["provenance"]["schema_version"] == 2


def test_sizes_in_the_bucket_use_the_entry(server: Server) -> None:
    doc = post(server, {"shape": [3, 333333], "dtype": "float16", "reduction": "mean"}).json()
    assert doc["source"] == "table" and doc["params"] == GOOD and doc["n"] == 999999


def test_untuned_variant_falls_back_to_the_model(server: Server) -> None:
    doc = post(server, {"shape": [4096], "dtype": "bfloat16", "reduction": "sum", "soc": "Ascend910B4"}).json()
    assert doc["source"] == "model" and doc["soc"] == "Ascend910B4"
    t = compute_tiling([4096], "bfloat16", "sum", TilingParams(**doc["params"]), "Ascend910B4")
    assert validate(t) == [] and base64.b64decode(doc["tiling_b64"]) == t.to_bytes()


def test_broken_table_entry_is_never_served(server: Server) -> None:
    doc = post(server, {"shape": [1 << 20], "dtype": "float32", "reduction": "none"}).json()
    assert doc["source"] == "model" and doc["params"] != BROKEN
    t = compute_tiling([1 << 20], "float32", "none", TilingParams(**doc["params"]))
    assert validate(t) == []


def test_empty_tensor_gets_a_no_work_tiling(server: Server) -> None:
    doc = post(server, {"shape": [7, 0], "dtype": "int32"}).json()
    assert doc["block_dim"] == 0 and doc["n"] == 0 and doc["predicted_us"] == 0


@pytest.mark.parametrize(
    "body,field,needle",
    [
        ({"shape": [4, -1], "dtype": "float32"}, "shape", "dimension 1 is negative"),
        ({"shape": [1] * 9, "dtype": "float32"}, "shape", "at most 8 items"),
        ({"shape": [2**31 - 1] * 3, "dtype": "float32"}, "shape", "exceeds int64"),
        ({"shape": [2**31], "dtype": "float32"}, "shape", "above 2147483647"),
        ({"shape": [4], "dtype": "float64"}, "dtype", "'float32'"),
        ({"shape": [4], "dtype": "float32", "reduction": "max"}, "reduction", "'none'"),
        ({"shape": [4], "dtype": "float32", "soc": "Ascend910C"}, "soc", "unknown SoC 'Ascend910C'"),
        ({"shape": [4], "dtype": "int32", "reduction": "sum"}, "reduction", "supports reduction 'none' only"),
        ({"shape": [4], "dtype": "int16", "reduction": "mean"}, "reduction", "supports reduction 'none' only"),
        ({"shape": [4], "dtype": "float32", "block": 5}, "block", "Extra inputs are not permitted"),
        ({"dtype": "float32"}, "shape", "Field required"),
        ({"shape": "4", "dtype": "float32"}, "shape", "valid list"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(server: Server, body: dict, field: str, needle: str) -> None:
    r = post(server, body)
    assert r.status_code == 422
    errors = r.json()["detail"]
    assert any(e["loc"][-1] == field or e["loc"][1:2] == [field] for e in errors), errors
    assert any(needle in e["msg"] for e in errors), errors


def test_malformed_json_is_a_422(server: Server) -> None:
    r = httpx.post(server.url + "/tiling", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_corrupt_table_stops_start_up_with_the_file_named(tmp_path: Path) -> None:
    (tmp_path / "Ascend910B2.json").write_text(json.dumps({"schema_version": 2, "soc": "Ascend910B2"}))
    r = subprocess.run(
        [sys.executable, "-m", "service", "--tables", str(tmp_path), "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "Ascend910B2.json" in r.stderr and "soc_profile_hash missing" in r.stderr


def test_shipped_tables_validate_and_answer_the_readme_request() -> None:
    from service.resolver import TilingResolver
    from service.tables_store import load_tables

    tables = load_tables()
    assert "Ascend910B2" in tables
    for soc, table in tables.items():
        assert table.soc_profile_hash == load_soc(soc).profile_hash, f"{soc} table is stale"
        for e in table.entries:
            t = compute_tiling([e.size], e.dtype, e.reduction, e.tiling_params(), soc, "exact", e.weight)
            assert validate(t) == [], (soc, e)
    r = TilingResolver(tables).resolve_shape([1024, 1024], "float16", "mean", "Ascend910B2", True)
    assert r.source == "table"

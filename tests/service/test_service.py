"""The service over real HTTP: a uvicorn process per fixture, httpx as the client."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_helpers import BROKEN, GOOD, INEXPRESSIBLE, OTHER, Server, _free_port, _wait_for, entry, make_table

from kernel.sources import kernel_source_hash
from service.schemas import BatchResponse, ReadyResponse, SocInfo, TablesResponse, TilingResponse
from tiling_model import TilingParams, Variant, compute_tiling, known_socs, load_soc, predict, validate
from tiling_model.kernels import bce_grad_kernel
from tiling_model.space import score_space
from tiling_model.tables import write_table

pytestmark = pytest.mark.slow  # real servers (python -m service) over HTTP


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("tables")
    entries = [
        entry("float16", "mean", 1 << 20, GOOD),
        entry("float32", "none", 1 << 20, BROKEN),
        entry("int32", "none", 4096, INEXPRESSIBLE),
    ]
    write_table(make_table(entries), d / "Ascend910B2.json")
    srv = Server(d, "--reload-interval", "0")
    yield srv
    srv.stop()


def post(server: Server, body: object) -> httpx.Response:
    return server.post("/tiling", body)


# --- endpoints -------------------------------------------------------------------------------------


def test_health_ready_docs(server: Server) -> None:
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(server.url + "/readyz").json() == {
        "ready": True,
        "tables": 1,
        "socs": ["Ascend910B2"],
        "empty": [],
        "status": "ready",
        "degraded": None,
    }
    for page in ("/docs", "/redoc"):  # offline: every script and style sheet from the service itself
        html = httpx.get(server.url + page)
        assert html.status_code == 200
        assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html.text)
        assert assets and all(a.startswith("/docs-static/") for a in assets), assets
        for a in assets:
            got = httpx.get(server.url + a)
            assert got.status_code == 200 and len(got.content) > 50_000, a
    spec = httpx.get(server.url + "/openapi.json").json()
    assert {"/tiling", "/tiling/batch", "/socs", "/tables", "/metrics", "/readyz"} <= set(spec["paths"])
    assert spec["components"]["schemas"]["TilingRequest"]["examples"]


def test_every_200_is_its_documented_model(server: Server) -> None:
    """The routes answer with orjson bytes (no model round trip on the hot path): here every 200
    body is parsed strictly as the response model the route declares."""
    req = {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"}
    cases = [
        (post(server, req), TilingResponse),
        (post(server, {"shape": [999999], "dtype": "float16", "reduction": "mean"}), TilingResponse),  # bucket
        (post(server, {"shape": [77], "dtype": "bfloat16", "soc": "Ascend910B4"}), TilingResponse),  # model
        (post(server, {"shape": [77], "dtype": "int16", "params": {"buffer_num": 1}}), TilingResponse),
        (server.post("/tiling/batch", {"requests": [req, req]}), BatchResponse),
        (httpx.get(server.url + "/tables"), TablesResponse),
        (httpx.get(server.url + "/readyz"), ReadyResponse),
    ]
    for r, model in cases:
        assert r.status_code == 200, r.text
        model.model_validate_json(r.text, strict=True)
    socs = httpx.get(server.url + "/socs")
    assert [SocInfo.model_validate(s, strict=True).name for s in socs.json()] == list(known_socs())


def test_readyz_is_503_while_a_table_has_no_entry_that_validates(tmp_path: Path) -> None:
    write_table(make_table([entry("float32", "none", 1 << 20, BROKEN)]), tmp_path / "Ascend910B2.json")
    srv = Server(tmp_path, "--reload-interval", "0")
    try:
        r = httpx.get(srv.url + "/readyz")
        assert r.status_code == 503 and r.json() == {"ready": False, "tables": 1, "socs": ["Ascend910B2"],
                                                     "empty": ["Ascend910B2"], "status": "not_ready",
                                                     "degraded": None}  # fmt: skip
        assert post(srv, {"shape": [8], "dtype": "float32"}).json()["source"] == "model"  # still answers
    finally:
        srv.stop()


def test_socs_lists_every_profile(server: Server) -> None:
    socs = {s["name"]: s for s in httpx.get(server.url + "/socs").json()}
    assert set(socs) == {"Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend310B1"}
    assert socs["Ascend910B2"]["calibrated"] and socs["Ascend910B2"]["aiv_cores"] == 48
    assert socs["Ascend910B2"]["profile_hash"] == load_soc("Ascend910B2").profile_hash


def test_tables_report_provenance_and_dropped_entries(server: Server) -> None:
    doc = httpx.get(server.url + "/tables").json()
    (t,) = doc["tables"]
    assert t["soc"] == "Ascend910B2" and t["entries"] == 1 and t["invalid_entries"] == 2
    assert t["stale"] is False and t["kernel_hash"] == kernel_source_hash()


def test_exact_entry_is_served_with_its_exact_bytes(server: Server) -> None:
    r = post(server, {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["source"] == "exact" and doc["params"] == GOOD
    assert doc["given"] == [] and doc["tuned"] == ["block_bytes", "buffer_num", "tile_bytes", "core_num"]
    t = compute_tiling([1 << 20], Variant("float16", "mean"), TilingParams(**GOOD))
    assert doc["tiling"] == t.field_dict() and list(doc["tiling"]) == list(t.field_dict())
    assert base64.b64decode(doc["tiling_b64"]) == t.to_bytes()
    assert (doc["block_dim"], doc["tiling_key"]) == (t.block_dim, t.tiling_key)
    assert doc["predicted_us"] == pytest.approx(predict(t), abs=1e-4)
    assert 0 < doc["roofline_us"] <= doc["predicted_us"]
    assert doc["provenance"]["schema_version"] == 5 and doc["provenance"]["backend"] == "model"


def test_sizes_in_the_bucket_refit_the_entry(server: Server) -> None:
    """Unseen size: the bucket's BUFFER_NUM stays; block, cores and tile are the model's best for it."""
    doc = post(server, {"shape": [3, 333333], "dtype": "float16", "reduction": "mean"}).json()
    assert doc["source"] == "bucket" and doc["n"] == 999999
    p = doc["params"]
    assert p["buffer_num"] == GOOD["buffer_num"]
    soc = load_soc("Ascend910B2")
    got = predict(compute_tiling([999999], Variant("float16", "mean"), TilingParams(**p)), soc)
    as_is = predict(compute_tiling([999999], Variant("float16", "mean"), TilingParams(**GOOD)), soc)
    scored = score_space(bce_grad_kernel(Variant("float16", "mean")), soc, 999999, buffers_only=(GOOD["buffer_num"],))
    assert got <= as_is and got == pytest.approx(float(scored.result.predicted_us.min()), rel=1e-9)


def test_untuned_soc_falls_back_to_the_model(server: Server) -> None:
    doc = post(server, {"shape": [4096], "dtype": "bfloat16", "reduction": "sum", "soc": "Ascend910B4"}).json()
    assert doc["source"] == "model" and doc["soc"] == "Ascend910B4"
    t = compute_tiling([4096], Variant("bfloat16", "sum"), TilingParams(**doc["params"]), "Ascend910B4")
    assert validate(t) == [] and base64.b64decode(doc["tiling_b64"]) == t.to_bytes()


def test_broken_table_entry_is_never_served(server: Server) -> None:
    doc = post(server, {"shape": [1 << 20], "dtype": "float32", "reduction": "none"}).json()
    assert doc["source"] == "model" and doc["params"] != BROKEN
    assert validate(compute_tiling([1 << 20], Variant("float32", "none"), TilingParams(**doc["params"]))) == []


@pytest.mark.parametrize(
    "variant",
    [{"pos_weight": "full"}, {"pos_weight": "last_dim"}, {"wrt": "probability"}, {"weight": False}],
)
def test_operator_variants_get_valid_tilings(server: Server, variant: dict) -> None:
    body = {"shape": [64, 1000], "dtype": "float16", "reduction": "mean", **variant}
    doc = post(server, body).json()
    v = Variant(
        "float16", "mean", variant.get("weight", True), variant.get("pos_weight", "none"), variant.get("wrt", "logit")
    )
    t = compute_tiling([64, 1000], v, TilingParams(**doc["params"]), "Ascend910B2")
    assert validate(t) == [] and base64.b64decode(doc["tiling_b64"]) == t.to_bytes()
    if variant.get("pos_weight") == "last_dim":
        assert doc["tiling"]["posWeightClasses"] == 1000


def test_the_fused_kernel_mode_is_answered_for_its_own_kernel_and_grad_stays_the_default(server: Server) -> None:
    """mode='fused' names the BCEWithLogits loss-and-gradient kernel: its tiling (no table tunes it yet: the
    model's pick) with the mode digit in the key, the fused kernel's UB plan, its own answer beside grad's."""
    body = {"shape": [96, 1031], "dtype": "float32", "reduction": "mean", "weight": [1031], "pos_weight": [1031]}
    grad, fused = post(server, body).json(), post(server, {**body, "mode": "fused"}).json()
    assert grad["mode"] == "grad" and grad["tiling_key"] // 10**6 % 10 == 0
    assert fused["mode"] == "fused" and fused["tiling_key"] // 10**6 % 10 == 1 and fused["source"] == "model"
    v = Variant("float32", "mean", "last_dim", "last_dim", "logit", "fused")
    t = compute_tiling([96, 1031], v, TilingParams(**fused["params"]), "Ascend910B2", weight_period=1031)
    assert validate(t) == [] and base64.b64decode(fused["tiling_b64"]) == t.to_bytes()
    assert t.kernel.outputs == ("dx",) and t.kernel.ub_bytes(t.params.tile_bytes, t.params.buffer_num) <= 188160


def test_given_knobs_are_kept_and_the_rest_completed(server: Server) -> None:
    doc = post(
        server,
        {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean", "params": {"buffer_num": 1, "core_num": 7}},
    ).json()
    assert doc["given"] == ["buffer_num", "core_num"] and doc["tuned"] == ["block_bytes", "tile_bytes"]
    assert doc["params"] == GOOD | {"buffer_num": 1, "core_num": 7}
    # a bigger block with the tuned tile and double buffering: served as asked, and valid
    doc = post(
        server, {"shape": [1 << 24], "dtype": "float32", "params": {"buffer_num": 2, "block_bytes": 4096}}
    ).json()
    t = compute_tiling([1 << 24], Variant("float32", "none"), TilingParams(**doc["params"]))
    assert validate(t) == [] and doc["params"]["block_bytes"] == 4096


def test_given_knobs_that_break_a_rule_are_a_422_with_the_violations(server: Server) -> None:
    r = post(server, {"shape": [1 << 20], "dtype": "float32", "params": {"tile_bytes": 65536, "buffer_num": 2}})
    assert r.status_code == 422
    (item,) = r.json()["detail"]
    assert item["loc"] == ["body", "params", "tile_bytes"] and item["type"] == "invalid_tiling"
    assert [v["kind"] for v in item["violations"]] == ["ub_overflow"]
    r = post(server, {"shape": [100], "dtype": "float32", "params": {"block_bytes": 36}})
    (item,) = r.json()["detail"]
    assert r.status_code == 422 and "not a multiple of 32" in item["msg"]
    assert item["loc"] == ["body", "params", "block_bytes"]
    r = post(server, {"shape": [1 << 20], "dtype": "float32", "params": {"core_num": 48, "buffer_num": 4}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "params", "buffer_num"]


def test_batch_answers_in_order_like_single_requests(server: Server) -> None:
    reqs = [{"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"}, {"shape": [7], "dtype": "int16"}]
    r = server.post("/tiling/batch", {"requests": reqs})
    assert r.status_code == 200, r.text
    assert r.json()["responses"] == [post(server, q).json() for q in reqs]
    bad = server.post(
        "/tiling/batch", {"requests": [reqs[0], {"shape": [8], "dtype": "float32", "params": {"tile_bytes": 65536}}]}
    )
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "requests", 1, "params", "tile_bytes"]
    too_many = server.post("/tiling/batch", {"requests": [reqs[1]] * 257})
    assert too_many.status_code == 422 and "at most 256" in too_many.json()["detail"][0]["msg"]
    empty = server.post("/tiling/batch", {"requests": []})
    assert empty.status_code == 422
    # items are validated in turn: one refused ends the batch before the next is even parsed (a batch that
    # is refused at its first item costs its first item, not 256 validations)
    first_refused = [{"shape": [1 << 30, 16], "dtype": "float32"}, {"shape": "not a shape", "dtype": 7}]
    r = server.post("/tiling/batch", {"requests": first_refused})
    assert r.status_code == 422 and [d["loc"][:3] for d in r.json()["detail"]] == [["body", "requests", 0]]


def test_metrics_count_requests_sources_and_latency(server: Server) -> None:
    post(server, {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"})
    post(server, {"shape": [-1], "dtype": "float16"})
    text = httpx.get(server.url + "/metrics").text
    assert 'bcetune_requests_total{endpoint="/tiling",method="POST",status="200"}' in text
    assert 'bcetune_requests_total{endpoint="/tiling",method="POST",status="422"}' in text
    assert 'bcetune_request_seconds_bucket{endpoint="/tiling",le="0.005",method="POST",status="200"}' in text
    assert 'bcetune_tiling_source_total{source="exact"}' in text


# --- errors ----------------------------------------------------------------------------------------


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
        ({"shape": [4], "dtype": "float32", "pos_weight": "full", "wrt": "probability"}, "wrt", "logit' only"),
        ({"shape": [], "dtype": "float32", "pos_weight": "last_dim"}, "pos_weight", "at least one dim"),
        ({"shape": [2**31 - 1] * 2, "dtype": "float32"}, "shape", "beyond the kernel's int64 GM offsets"),
        ({"shape": [4], "dtype": "int16", "wrt": "probability"}, "wrt", "needs a float dtype"),
        ({"shape": [4], "dtype": "int16", "mode": "fused"}, "mode", "mode='fused' needs a float dtype"),
        ({"shape": [4], "dtype": "float16", "wrt": "probability", "mode": "fused"}, "mode", "wrt='logit'"),
        ({"shape": [4], "dtype": "float16", "mode": "loss"}, "mode", "'grad' or 'fused'"),
        ({"shape": [], "dtype": "int32", "wrt": "probability"}, "wrt", "needs a float dtype"),
        ({"shape": [4], "dtype": "float32", "pos_weight": "row"}, "pos_weight", "'last_dim'"),
        ({"shape": [3, 4], "dtype": "float32", "weight": [5]}, "weight", "shape [5] does not broadcast to"),
        ({"shape": [2, 3, 4], "dtype": "float32", "weight": [2, 1, 4]}, "weight", "materialise this one"),
        ({"shape": [3, 4], "dtype": "float32", "weight": [2, 3, 4]}, "weight", "more dims than the input"),
        ({"shape": [], "dtype": "float32", "weight": "rows"}, "weight", "at least one dim"),
        ({"shape": [4], "dtype": "float32", "weight": "diagonal"}, "weight", "'last_dim'"),
        ({"shape": [4], "dtype": "float32", "weight": [-1]}, "weight", "outside 0..2147483647"),
        ({"shape": [4, 5], "dtype": "float32", "pos_weight": [4, 1]}, "pos_weight", "as rows; the kernel reads"),
        ({"shape": [4], "dtype": "float32", "pos_weight": [1] * 10000}, "pos_weight", "10000 dims; at most 8"),
        ({"shape": [-4], "dtype": "float32", "pos_weight": [1] * 9}, "pos_weight", "9 dims; at most 8"),
        ({"shape": [4], "dtype": "float32", "pos_weight": [2**31]}, "pos_weight", "outside 0..2147483647"),
        # a 200 here once named a 206 GB workspace on a 64 GiB device
        ({"shape": [2, 2**30], "dtype": "float16", "weight": [2**30]}, "shape", "needs 210.0 GiB of device memory"),
        ({"shape": [2**31 - 1, 4], "dtype": "float32"}, "shape", "Ascend910B2 has 64 GiB"),
        ({"shape": [2**31 - 1, 2], "dtype": "float32", "soc": "Ascend910B4"}, "shape", "Ascend910B4 has 32 GiB"),
        ({"shape": [4], "dtype": "float32", "block": 5}, "block", "Extra inputs are not permitted"),
        ({"shape": [4], "dtype": "float32", "params": {"tile": 5}}, "tile", "Extra inputs are not permitted"),
        ({"shape": [4], "dtype": "float32", "params": {"buffer_num": 5}}, "buffer_num", "less than or equal to 4"),
        ({"shape": [4], "dtype": "float32", "params": {"block_bytes": 16}}, "block_bytes", "greater than or equal"),
        ({"dtype": "float32"}, "shape", "Field required"),
        ({"shape": "4", "dtype": "float32"}, "shape", "valid list"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(server: Server, body: dict, field: str, needle: str) -> None:
    r = post(server, body)
    assert r.status_code == 422
    errors = r.json()["detail"]
    assert any(field in e["loc"] for e in errors), errors
    assert any(needle in e["msg"] for e in errors), errors


def test_malformed_json_is_a_422(server: Server) -> None:
    r = httpx.post(server.url + "/tiling", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 422


ONLY_PYTHONS_PARSER_TAKES = [  # (a value json.loads reads and orjson, the service's parser, does not; the 422 says)
    (b"NaN", "unexpected character"),
    (b"1e999", "infinity"),
    (b'"\\ud800"', "surrogate"),
    (b'"float\xff16"', "UTF-8"),
    (b"9" * 30, "valid integer"),  # read as a float: not an integer
]


@pytest.mark.parametrize(("value", "why"), ONLY_PYTHONS_PARSER_TAKES, ids=lambda v: str(v)[:14])
def test_json_only_pythons_parser_takes_is_a_422_saying_why(server: Server, value: bytes, why: str) -> None:
    one = b'{"shape":[4],"dtype":"float16","params":{"tile_bytes":' + value + b"}}"
    for path, body in (("/tiling", one), ("/tiling/batch", b'{"requests":[' + one + b"]}"), ("/tiling/explain", one)):
        r = httpx.post(server.url + path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, (path, value, r.text)
        (item,) = r.json()["detail"]
        assert why in item["msg"], (path, value, item)
        assert item["type"] in ("json_invalid", "int_type"), item


def test_a_batch_item_that_is_not_an_object_is_a_422_at_its_index(server: Server) -> None:
    good = {"shape": [4], "dtype": "float16"}
    for bad in (5, "x", [good], None):
        r = server.post("/tiling/batch", {"requests": [good, good, bad, good]})
        assert r.status_code == 422, (bad, r.text)
        (item,) = r.json()["detail"]
        assert item["loc"] == ["body", "requests", 2] and item["type"] == "model_type", item


def test_oversized_bodies_are_a_413(server: Server) -> None:
    big = {"shape": [1], "dtype": "float32", "pad": "x" * 70000}
    r = post(server, big)
    assert r.status_code == 413 and r.json()["detail"][0]["type"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        yield b'{"shape": [1], "dtype": "float32", "pad": "'
        for _ in range(20):
            yield b"x" * 8192
        yield b'"}'

    r = httpx.post(server.url + "/tiling", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


# --- tables: start-up, reload -----------------------------------------------------------------------


def test_corrupt_table_stops_start_up_with_the_file_named(tmp_path: Path) -> None:
    (tmp_path / "Ascend910B2.json").write_text(json.dumps({"schema_version": 5, "soc": "Ascend910B2"}))
    r = subprocess.run(
        [sys.executable, "-m", "service", "--tables", str(tmp_path), "--port", str(_free_port())],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "Ascend910B2.json" in r.stderr and "soc_profile_hash missing" in r.stderr


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    for args, needle in [
        (["--default-soc", "Ascend999"], "default SoC 'Ascend999' unknown"),
        (["--port", "70000"], "out of range"),
        (["--log-level", "loud"], "log level"),
        (["--shutdown-grace", "-1"], "shutdown grace must be >= 0 s"),
    ]:
        r = subprocess.run([sys.executable, "-m", "service", *args], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)


def test_the_heavy_share_has_its_old_names_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """--heavy-share / BCETUNE_HEAVY_SHARE were --batch-share / BCETUNE_BATCH_SHARE while only batches were
    charged: the old names still set it (the new one first), and a share outside (0, 1) is refused."""
    from service.config import Settings

    monkeypatch.delenv("BCETUNE_HEAVY_SHARE", raising=False)
    monkeypatch.setenv("BCETUNE_BATCH_SHARE", "0.3")
    assert Settings.from_env().heavy_share == 0.3
    monkeypatch.setenv("BCETUNE_HEAVY_SHARE", "0.4")
    assert Settings.from_env().heavy_share == 0.4 and Settings.from_env().to_env()["BCETUNE_HEAVY_SHARE"] == "0.4"
    for flag in ("--heavy-share", "--batch-share"):
        r = subprocess.run([sys.executable, "-m", "service", flag, "1.5"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "heavy share in (0, 1)" in r.stderr, (flag, r.stderr)


def test_tables_reload_on_change_and_sighup_and_refuse_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "Ascend910B2.json"
    write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), path)
    srv = Server(tmp_path, "--reload-interval", "0.1")
    body = {"shape": [1 << 20], "dtype": "float16", "reduction": "mean"}
    try:
        assert srv.post("/tiling", body).json()["params"] == GOOD
        write_table(make_table([entry("float16", "mean", 1 << 20, OTHER)]), path)
        _wait_for(lambda: srv.post("/tiling", body).json()["params"] == OTHER)
        path.write_text("{ not json")  # a bad new table: refused, the old one keeps serving
        _wait_for(lambda: httpx.get(srv.url + "/tables").json()["last_reload_error"] is not None)
        assert srv.post("/tiling", body).json()["params"] == OTHER
        refused = httpx.get(srv.url + "/tables").json()
        assert "not valid JSON" in refused["last_reload_error"] and refused["failed_reloads"] == 1
        write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)], profile_hash="0" * 16), path)
        _wait_for(lambda: srv.post("/tiling", body).json()["params"] == GOOD)
        (t,) = httpx.get(srv.url + "/tables").json()["tables"]
        assert t["stale"] and t["stale_reasons"] == ["SoC profile changed since tuning"]
        before = httpx.get(srv.url + "/tables").json()["reloads"]
        os.kill(srv.proc.pid, signal.SIGHUP)
        _wait_for(lambda: httpx.get(srv.url + "/tables").json()["reloads"] == before + 1)
        text = httpx.get(srv.url + "/metrics").text
        assert 'bcetune_table_reloads_total{result="refused"}' in text
    finally:
        log = srv.stop()
    assert '"msg": "table reload refused; still serving the previous tables"' in log


def test_shipped_tables_are_fresh_valid_and_answer_the_readme_request() -> None:
    from service.answers import Query
    from service.config import SHIPPED_TABLES
    from service.store import load_snapshot

    snap = load_snapshot(SHIPPED_TABLES)
    assert set(snap.tables) == {"Ascend910B1", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend310B1"}
    for soc, lt in snap.tables.items():
        assert lt.stale_reasons() == [], soc
        assert lt.invalid == (), soc
    doc = snap.answers.resolve(Query("Ascend910B2", (1024, 1024), Variant("float16", "mean"), ()))
    assert doc["source"] == "exact"


def test_a_tuned_tile_too_big_for_the_given_buffers_is_shrunk_to_fit(server: Server) -> None:
    body = {"shape": [1 << 22], "dtype": "float32", "reduction": "mean", "weight": False, "params": {"buffer_num": 4}}
    tuned = post(server, {k: v for k, v in body.items() if k != "params"}).json()["params"]
    r = post(server, body)
    assert r.status_code == 200, r.text
    doc = r.json()
    t = compute_tiling([1 << 22], Variant("float32", "mean", weight=False), TilingParams(**doc["params"]))
    assert validate(t) == [] and doc["given"] == ["buffer_num"] and doc["params"]["buffer_num"] == 4
    assert tuned["buffer_num"] != 4 and doc["params"]["tile_bytes"] < tuned["tile_bytes"]


@pytest.mark.parametrize(
    ("weight", "form", "period"),
    [
        ([1000], "last_dim", 1000), ([1, 1000], "last_dim", 1000), ("last_dim", "last_dim", 1000),
        ([1024, 1], "rows", 1000), ("rows", "rows", 1000), ([1], "scalar", 0), ([], "scalar", 0),
        ("scalar", "scalar", 0),
        ([1024, 1000], "full", 0), (True, "full", 0), ("none", "none", 0), (False, "none", 0),
    ],
)  # fmt: skip
def test_weight_is_a_form_or_a_shape(server: Server, weight: object, form: str, period: int) -> None:
    """weight as PyTorch allows it: the answer names the form and its period; an untuned form is the full
    weight's bucket re-fitted with its own kernel (source bucket), and its struct carries the period."""
    doc = post(server, {"shape": [1024, 1000], "dtype": "float16", "reduction": "mean", "weight": weight}).json()
    assert doc["weight"] == form and doc["weight_period"] == period and doc["tiling"]["weightPeriod"] == period
    v = Variant("float16", "mean", form)  # type: ignore[arg-type]
    t = compute_tiling([1024, 1000], v, TilingParams(**doc["params"]), "Ascend910B2", "exact", period or None)
    assert base64.b64decode(doc["tiling_b64"]) == t.to_bytes() and validate(t) == []
    assert doc["workspace_bytes"] == t.workspace_bytes and (doc["workspace_bytes"] > 0) == (form == "last_dim")
    assert doc["source"] == ("model" if form == "none" else "bucket")  # the table tunes only the full weight here
    assert doc["params"]["buffer_num"] == GOOD["buffer_num"] or form == "none"


def test_empty_tensors_say_there_is_nothing_to_launch(server: Server) -> None:
    for body in (
        {"shape": [0], "dtype": "float32"},
        {"shape": [4096, 0], "dtype": "float16", "weight": [0], "pos_weight": "last_dim"},
        {"shape": [0, 7], "dtype": "int16", "weight": [0, 1]},
    ):
        doc = post(server, body).json()
        assert doc["launch"] is False and doc["block_dim"] == 0 and doc["workspace_bytes"] == 0, doc
        assert doc["predicted_us"] == 0 and doc["n"] == 0


@pytest.mark.parametrize("delay", [0.0, 0.2, 0.4, 0.6, 0.9])
def test_sigterm_soon_after_start_exits_cleanly_as_pid_1_would(delay: float) -> None:
    """As PID 1 in a container, the SIGTERM uvicorn re-raises after its graceful shutdown is ignored and
    the interpreter finalizes while start-up work may still be running: no thread may be inside the
    engine then (a daemon thread there aborted the process: exit 134 here, 139 in Docker). The parent
    ignores SIGTERM for the child, which is what PID 1's default disposition does."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "--port", str(port), "--log-level", "info"],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN),
    )
    url = f"http://127.0.0.1:{port}/healthz"

    def up() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        _wait_for(up, timeout=30)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "Finished server process" in err

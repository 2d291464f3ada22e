"""The service against hostile input and clients, over real HTTP and raw sockets: no input yields a 5xx,
numbers stay right at the limits, slow and flooding clients are cut off, table-directory faults are
refused while the old tables keep serving."""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from service_helpers import GOOD, INEXPRESSIBLE, Server, _wait_for, entry, make_table

from service.errors import safe
from tiling_model import TilingParams, Variant, compute_tiling, load_soc, predict_detail
from tiling_model.cost import kinds_of
from tiling_model.dtypes import DTYPE_BYTES
from tiling_model.tables import write_table

pytestmark = pytest.mark.slow  # real servers under hostile clients

INT64_MAX = 2**63 - 1


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Server:
    d = tmp_path_factory.mktemp("tables")
    write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), d / "Ascend910B2.json")
    srv = Server(d, "--reload-interval", "0", "--request-timeout", "1.5", "--max-connections", "40")
    yield srv
    srv.stop()


def raw(server: Server, body: bytes, path: str = "/tiling") -> httpx.Response:
    return httpx.post(server.url + path, content=body, headers={"content-type": "application/json"}, timeout=30)


# --- no input yields a 5xx --------------------------------------------------------------------------

NON_JSON_VALUES = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b'"\\ud800"', b'"\\udfff\\ud800"',
                   b"1" + b"0" * 40, b"-" + b"9" * 30, b'"' + b"x" * 5000 + b'"',
                   b"[" * 2000 + b"]" * 2000]  # fmt: skip


@pytest.mark.parametrize("value", NON_JSON_VALUES, ids=lambda v: v[:12].decode())
def test_non_finite_surrogate_and_huge_values_anywhere_are_a_422(server: Server, value: bytes) -> None:
    bodies = [
        b'{"shape":[' + value + b'],"dtype":"float16"}',
        b'{"shape":[4],"dtype":' + value + b"}",
        b'{"shape":[4],"dtype":"float16","unknown":' + value + b"}",
        b'{"shape":[4],"dtype":"float16","params":{"tile_bytes":' + value + b"}}",
        b'{"requests":[{"shape":[4],"dtype":"float16","q":' + value + b"}]}",
        b'{"shape":[4],"dtype":"float16",' + (value if value.startswith(b'"') else b'"k"') + b":1}",
    ]
    for body in bodies:
        for path in ("/tiling", "/tiling/batch"):
            r = raw(server, body, path)
            assert r.status_code == 422, (body[:80], path, r.status_code, r.text[:300])
            json.loads(r.text)  # strict JSON: no NaN, encodable
            assert len(r.content) < 20000


def test_the_finite_request_space_never_gets_a_5xx(server: Server) -> None:
    """Every dtype x reduction x wrt x pos_weight x weight x shape class x knob class, alone and batched."""
    shapes = [[], [0], [1], [7], [0, 5], [5, 0], [33, 17], [1 << 20], [2**31 - 1], [2**31 - 1] * 2, [1] * 8]
    knobs = [None, {}, {"buffer_num": 1}, {"buffer_num": 4}, {"block_bytes": 32}, {"block_bytes": 2**31 - 1},
             {"tile_bytes": 32}, {"tile_bytes": 196608}, {"core_num": 1}, {"core_num": 48}, {"core_num": 64},
             {"block_bytes": 8192, "buffer_num": 3, "tile_bytes": 1024, "core_num": 7}]  # fmt: skip
    variants = itertools.product(
        DTYPE_BYTES, ("none", "sum", "mean"), ("logit", "probability"), ("none", "full", "last_dim"), (True, False)
    )
    statuses: dict[int, int] = {}
    batch: list[dict] = []
    for (dtype, reduction, wrt, pos_weight, weight), shape in itertools.product(variants, shapes):
        body: dict = {"shape": shape, "dtype": dtype, "reduction": reduction, "wrt": wrt, "pos_weight": pos_weight}
        body["weight"] = weight
        knob = knobs[len(batch) % len(knobs)]  # every knob class across the space, without the full product
        if knob is not None:
            body["params"] = knob
        r = server.post("/tiling", body)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        assert r.status_code in (200, 422), (body, r.status_code, r.text[:300])
        if r.status_code == 200:
            doc = r.json()
            assert doc["predicted_us"] >= 0 and doc["roofline_us"] >= 0, (body, doc)
        batch.append(body)
    assert statuses[200] > 400 and statuses[422] > 400, statuses  # both outcomes are exercised
    for i in range(0, len(batch), 256):
        r = server.post("/tiling/batch", {"requests": batch[i : i + 256]})
        assert r.status_code in (200, 422, 503), r.text[:300]


def test_a_refused_request_is_refused_from_the_cache_the_second_time(server: Server) -> None:
    body = {"shape": [3_000_017], "dtype": "float32", "params": {"tile_bytes": 65536, "buffer_num": 2}}
    first, second = server.post("/tiling", body), server.post("/tiling", body)
    assert first.status_code == second.status_code == 422 and first.json() == second.json()
    text = httpx.get(server.url + "/metrics").text
    assert "bcetune_requests_total" in text


# --- numbers at the limits ----------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    dims=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=3),
    dtype=st.sampled_from(sorted(DTYPE_BYTES)),
    soc=st.sampled_from(["Ascend910B2", "Ascend310B1"]),
)
def test_predictions_stay_finite_and_exact_up_to_the_largest_accepted_shape(
    dims: list[int], dtype: str, soc: str
) -> None:
    n = 1
    for d in dims:
        n *= d
    if n * DTYPE_BYTES[dtype] > INT64_MAX:  # the service refuses these (test_service's 422 cases)
        return
    t = compute_tiling(dims, Variant(dtype, "none"), TilingParams(), soc)
    d = predict_detail(t, load_soc(soc))
    k = t.kernel
    covered = sum(int(c) * int(e) for c, e in zip(kinds_of(t).cores[0], kinds_of(t).elems[0], strict=True))
    assert covered == n
    exact = k.streams * n * t.elem_bytes + len(k.scalar_inputs) * t.elem_bytes + t.block_dim * k.row_bytes
    # the engine counts bytes in doubles: exact below 2**53 (8 PiB, thousands of times any A2's HBM), the
    # nearest doubles' sum above
    assert d.bytes_moved == exact if exact < 2**53 else abs(d.bytes_moved - exact) <= exact * 2**-50
    assert 0 <= d.roofline_us <= d.predicted_us < float("inf")
    if n:
        assert d.roofline_us > n * t.elem_bytes / (load_soc(soc).l2_peak_gbps * 1e3)  # never below physics
    assert all(0 <= v <= INT64_MAX for v in t.field_dict().values())


def test_safe_echo_is_encodable_and_short() -> None:
    assert safe(float("nan")) == "nan" and safe(float("-inf")) == "-inf"
    assert safe("\ud800x") == "\\ud800x"
    assert safe(10**40).startswith("<integer of 41 digits")
    assert len(safe("x" * 10000)) < 200
    assert safe({str(i): i for i in range(100)})["..."] == "84 more keys"


# --- slow and flooding clients -----------------------------------------------------------------------


def _connect(server: Server) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.port))
    s.settimeout(20)
    return s


def _read_all(s: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except OSError:
        pass
    return out


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /tiling HTTP/1.1\r\nHost: x\r\n",
     b"POST /tiling HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"sh"],
    ids=["silent", "partial-headers", "partial-body"],
)  # fmt: skip
def test_a_slow_client_is_cut_off_with_a_408(server: Server, sent: bytes) -> None:
    s = _connect(server)
    start = time.monotonic()
    s.sendall(sent)
    answer = _read_all(s)
    waited = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer, answer[:200]
    assert 1.0 < waited < 6.0, waited


def test_a_header_flood_is_a_431_and_costs_no_memory(server: Server) -> None:
    def rss_kib() -> int:
        status = Path(f"/proc/{server.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))

    before = rss_kib()
    s = _connect(server)
    sent = 0
    try:
        s.sendall(b"POST /tiling HTTP/1.1\r\nHost: x\r\n")
        while sent < 64 * 2**20:  # up to 64 MiB of headers
            s.sendall(b"X-Junk: " + b"a" * 4096 + b"\r\n")
            sent += 4106
    except OSError:
        pass  # the server closed the connection: what we want
    answer = _read_all(s)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert sent < 16 * 2**20  # cut off long before the 64 MiB
    assert rss_kib() - before < 32 * 1024
    s = _connect(server)  # one giant header value in one go
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 200_000)
    except OSError:
        pass
    assert _read_all(s).startswith(b"HTTP/1.1 431 ")
    assert httpx.get(server.url + "/healthz").status_code == 200


def test_past_the_connection_cap_with_none_idle_a_request_gets_a_503_with_retry_after(server: Server) -> None:
    held = [_connect(server) for _ in range(45)]
    try:
        for h in held:  # each with a request under way (an idle one would be closed to make room)
            h.sendall(b"POST /tiling HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.2)
        s = _connect(server)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _read_all(s)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in answer, answer[:300]
    finally:
        for h in held:
            h.close()
    _wait_for(lambda: httpx.get(server.url + "/healthz").status_code == 200)


def test_a_garbage_request_line_is_a_400(server: Server) -> None:
    s = _connect(server)
    s.sendall(b"BREW /coffee HTCPCP/1.0\r\n\r\n")
    assert _read_all(s).startswith(b"HTTP/1.1 400 ")


# --- table-directory faults ----------------------------------------------------------------------------


def test_a_table_written_while_the_directory_is_read_is_never_taken_for_its_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a loaded CI run hit in the test below: a reload read an emptied directory's state, then found
    the table written just after it; kept under the empty state, emptying the directory again went unseen
    (last_reload_error stayed null). Here the table lands between the load's reading of the state and of the
    files: the snapshot takes neither state, so both are changes."""
    import service.store as store_module

    path = tmp_path / "Ascend910B2.json"
    write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), path)
    store = store_module.TableStore(tmp_path)
    path.unlink()
    real, calls = store_module._signature, []

    def then_the_table_lands(directory: Path) -> tuple:
        state = real(directory)
        calls.append(state)
        if len(calls) == 2:  # the load's own reading of the state (the reload read it first)
            write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), path)
        return state

    assert store.changed()
    monkeypatch.setattr(store_module, "_signature", then_the_table_lands)
    assert store.reload("test")  # the table written mid-read is loaded
    monkeypatch.setattr(store_module, "_signature", real)
    assert calls[1] == () and store.snapshot.signature == store_module.CHANGED_WHILE_READ
    assert store.changed()  # the table as it is now: loaded again at the next poll
    path.unlink()
    assert store.changed() and not store.reload("test")  # emptied again: seen and refused
    assert store.last_error is not None and "no <SoC>.json table left" in store.last_error.error


def test_table_directory_faults_are_refused_reloads_and_never_block(tmp_path: Path) -> None:
    path = tmp_path / "Ascend910B2.json"
    write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), path)
    srv = Server(tmp_path, "--reload-interval", "0.1")
    body = {"shape": [1 << 20], "dtype": "float16", "reduction": "mean"}
    faults = {
        "a FIFO": lambda: os.mkfifo(path),
        "a device": lambda: path.symlink_to("/dev/zero"),
        "a directory": lambda: path.mkdir(),
        "not UTF-8": lambda: path.write_bytes(b'{"schema_version": \xff\xfe}'),
        "an empty table": lambda: path.write_text("[]"),
        "no valid entry": lambda: write_table(make_table([entry("float16", "mean", 1 << 20, INEXPRESSIBLE)]), path),
        "an emptied directory": lambda: None,
    }
    expected = {"a FIFO": "not a regular file", "a device": "not a regular file", "not UTF-8": "not UTF-8",
                "a directory": "Ascend910B2.json: a directory, not a table file",
                "an empty table": "Ascend910B2.json", "no valid entry": "no entry validates",
                "an emptied directory": "has no <SoC>.json table left"}  # fmt: skip
    try:
        for name, make in faults.items():
            path.unlink(missing_ok=True)
            make()
            deadline = time.monotonic() + 10
            while expected[name] not in ((doc := httpx.get(srv.url + "/tables").json())["last_reload_error"] or ""):
                assert time.monotonic() < deadline, (name, doc["last_reload_error"])
                time.sleep(0.05)
            assert str(tmp_path) not in json.dumps(doc), doc  # no server paths in a public answer
            assert [t["path"] for t in doc["tables"]] == ["Ascend910B2.json"]
            assert srv.post("/tiling", body).json()["params"] == GOOD, name  # the old table keeps serving
            assert httpx.get(srv.url + "/readyz").status_code == 200, name
            assert srv.post("/tiling", {"shape": [12345], "dtype": "float32"}).status_code == 200, name
            path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
            write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), path)
            _wait_for(lambda: httpx.get(srv.url + "/tables").json()["last_reload_error"] is None)
    finally:
        log = srv.stop()
    for line in log.splitlines():
        json.loads(line)  # every log line is JSON, uvicorn's own included

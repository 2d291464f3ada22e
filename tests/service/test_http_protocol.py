"""The service's HTTP/1.1 over raw sockets, as clients really send it: pipelined requests (many in one
write, split at every byte), the header limit per request, an h2c upgrade, HEAD, and redirects that do
not echo the Host header."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from service_helpers import GOOD, Server, entry, make_table

from tiling_model.tables import write_table


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("tables")
    write_table(make_table([entry("float16", "mean", 1 << 20, GOOD)]), d / "Ascend910B2.json")
    srv = Server(d, "--reload-interval", "0", "--request-timeout", "5")
    yield srv
    srv.stop()


def tiling(n: int) -> bytes:
    """A POST /tiling for n elements (its answer's "n" says which request it answers)."""
    body = orjson.dumps({"shape": [n], "dtype": "float32"})
    head = b"POST /tiling HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


HEALTH = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def responses(s: socket.socket, want: int, timeout: float = 30) -> list[tuple[int, dict[str, str], bytes]]:
    """Up to ``want`` responses read off ``s`` (status, headers, body), fewer if it closes first."""
    s.settimeout(timeout)
    buf, out = b"", []
    while len(out) < want:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            lines = buf[:head_end].decode("latin-1").split("\r\n")
            headers = dict(line.lower().split(": ", 1) for line in lines[1:])
            length = int(headers.get("content-length", "0"))
            if len(buf) >= head_end + 4 + length:
                out.append((int(lines[0].split()[1]), headers, buf[head_end + 4 : head_end + 4 + length]))
                buf = buf[head_end + 4 + length :]
                continue
        try:
            chunk = s.recv(1 << 16)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        buf += chunk
    return out


def connect(server: Server) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


@pytest.mark.parametrize("n", [2, 17, 200, 2000])
def test_requests_in_one_write_are_all_answered_in_order(server: Server, n: int) -> None:
    """With bodies and without, mixed: 2000 of them are ~200 KB, many times the 16 KiB header limit
    (which once counted the whole read, pipelined requests included, and answered a 431)."""
    sizes = [1000 + i for i in range(n)]
    with connect(server) as s:
        s.sendall(b"".join(tiling(k) if i % 3 else HEALTH for i, k in enumerate(sizes)))
        got = responses(s, n)
    assert [status for status, _, _ in got] == [200] * n
    for i, (k, (_, _, body)) in enumerate(zip(sizes, got, strict=True)):
        assert orjson.loads(body) == {"status": "ok"} if i % 3 == 0 else orjson.loads(body)["n"] == k


@pytest.mark.parametrize("pair", ["bodies", "no-bodies"])
def test_two_requests_split_at_every_byte_are_both_answered(server: Server, pair: str) -> None:
    stream = tiling(4096) + tiling(4097) if pair == "bodies" else HEALTH + HEALTH
    for cut in range(1, len(stream)):
        with connect(server) as s:
            s.sendall(stream[:cut])
            time.sleep(0.001)  # two reads on the server's side (mostly: each case passes either way)
            s.sendall(stream[cut:])
            got = responses(s, 2, timeout=10)
        assert [status for status, _, _ in got] == [200, 200], (cut, got)
        if pair == "bodies":
            assert [orjson.loads(body)["n"] for _, _, body in got] == [4096, 4097], cut


def test_the_header_limit_is_per_request_and_a_request_over_it_waits_for_the_answers_before_it(
    server: Server,
) -> None:
    fits = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 12000 + b"\r\n\r\n"  # 12 KB < 16 KiB each
    with connect(server) as s:
        s.sendall(fits * 5)
        assert [status for status, _, _ in responses(s, 5)] == [200] * 5
    over = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20000 + b"\r\n\r\n"
    with connect(server) as s:
        s.sendall(b"".join(tiling(2000 + i) for i in range(300)) + over + tiling(1))
        got = responses(s, 302)
    assert [status for status, _, _ in got] == [200] * 300 + [431]  # in order; nothing after the refusal
    assert [orjson.loads(body)["n"] for _, _, body in got[:300]] == [2000 + i for i in range(300)]
    assert got[-1][1]["connection"] == "close"


def test_an_h2c_upgrade_is_answered_over_http_1_1(server: Server) -> None:
    upgrade = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
               b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")  # fmt: skip
    with connect(server) as s:
        s.sendall(upgrade)
        got = responses(s, 1)
    assert len(got) == 1 and got[0][0] == 200 and orjson.loads(got[0][2]) == {"status": "ok"}
    assert httpx.get(server.url + "/healthz").status_code == 200


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/tables", "/socs", "/metrics", "/explorer",
                                  "/static/explorer.js", "/openapi.json"])  # fmt: skip
def test_head_answers_where_get_does_with_the_same_headers_and_no_body(server: Server, path: str) -> None:
    get = httpx.get(server.url + path)
    with connect(server) as s:
        s.sendall(b"HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode() + HEALTH)  # then a GET on it
        s.settimeout(10)
        time.sleep(0.3)
        raw = s.recv(1 << 20)
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % get.status_code)
    headers = dict(line.lower().split(": ", 1) for line in head.decode("latin-1").split("\r\n")[1:])
    assert headers["content-type"] == get.headers["content-type"]
    if path not in ("/metrics", "/tables"):  # their bodies change between the two requests
        assert headers["content-length"] == str(len(get.content))
    assert rest.startswith(b"HTTP/1.1 200 ")  # no body between the HEAD's answer and the next one


def test_head_where_only_post_is_routed_is_a_405_naming_post(server: Server) -> None:
    r = httpx.head(server.url + "/tiling")
    assert r.status_code == 405 and r.headers["allow"] == "POST"


def test_a_trailing_slash_redirects_relatively_without_the_host_header(server: Server) -> None:
    r = httpx.get(server.url + "/tables/?x=1", headers={"host": "evil.example"}, follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/tables?x=1"
    assert httpx.get(server.url + "/tables/", follow_redirects=True).status_code == 200
    # a path that only a scheme-relative location would send elsewhere is no route: a 404, no redirect
    with connect(server) as s:
        s.sendall(b"GET //evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        got = responses(s, 1)
    assert got[0][0] == 404 and "location" not in got[0][1]

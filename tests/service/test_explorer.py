"""The tiling explorer: its data is the model's (explain), its pictures draw (PNG, SVG), the CLI and
the service serve them, and the page works in a real browser (headless Debian Chromium driven by
Selenium; it skips, saying why, where no browser is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from service_helpers import Server

from model_tools.explain import explain, schedule
from model_tools.explorer_plot import PICTURES, render
from service.config import SHIPPED_TABLES
from tiling_model import TilingParams, Variant, compute_tiling, load_soc, predict_detail, validate
from tiling_model.kernels import bce_grad_kernel
from tiling_model.model_types import WARMUP
from tiling_model.simulate import pipeline
from tiling_model.space import score_space

ROOT = Path(__file__).resolve().parents[2]
RUN = {"browser": 0}  # explorer checks run in headless Chromium (the summary line says how many)
README_REQUEST = {"shape": [1024, 1024], "dtype": "float16", "reduction": "mean"}


@pytest.mark.parametrize(
    ("shape", "variant", "params", "scheme"),
    [
        ([3, 333333], Variant("float16", "mean"), TilingParams(1024, 2, 14848, 42), "exact"),
        ([129], Variant("float32", "none"), TilingParams(), "seed"),
        ([64, 1000], Variant("bfloat16", "none", True, "last_dim"), TilingParams(), "exact"),
        ([77777], Variant("int16", "none", False), TilingParams(512, 1, 4096, 7), "exact"),
    ],
)
def test_the_explanation_is_the_models_own(
    shape: list[int], variant: Variant, params: TilingParams, scheme: str
) -> None:
    soc = load_soc("Ascend910B2")
    t = compute_tiling(shape, variant, params, soc, scheme)  # type: ignore[arg-type]
    e = explain(t, soc)
    pred = predict_detail(t, soc)
    assert e.predicted_us == round(pred.predicted_us, 4) and e.bottleneck == pred.bottleneck
    # the core map: every element once (the exact scheme), or past the end exactly where the seed rounds
    covered = sum(c.count - c.past_end for c in e.core_map)
    assert covered == t.n
    assert sum(c.past_end for c in e.core_map) == (127 if scheme == "seed" else 0)
    # the UB plan is what the kernel asks InitBuffer for
    assert e.ub.used_bytes == t.kernel.ub_bytes(t.fields.tileDataNum * t.elem_bytes, t.params.buffer_num)
    # the requirement's formula divides the whole UB, reserve included: it overflows, and validate says so
    assert (e.ub.used_bytes <= e.ub.usable_bytes) == (scheme == "exact")
    assert any(v.kind == "ub_overflow" for v in validate(t)) == (scheme == "seed")
    # the slowest kind's timeline ends where the prediction's slowest core does
    assert max(tl.end_us for tl in e.timelines) == pytest.approx(pred.core_us, rel=1e-12)
    # the landscape is the slice's scoring; its best is the slice's best
    land = e.landscape
    assert land is not None and (land.block_bytes, land.buffer_num) == (t.params.block_bytes, t.params.buffer_num)
    k = bce_grad_kernel(variant, "exact", max(t.fields.posWeightClasses, 1))
    scored = score_space(k, soc, t.n, blocks_only=(land.block_bytes,), buffers_only=(land.buffer_num,))
    assert np.nanmin(np.array(land.predicted_us, dtype=float)) == pytest.approx(
        float(scored.result.predicted_us.min()), abs=1e-4
    )
    best = scored.params(scored.best_index())
    assert land.marks["model best"] == (best.tile_bytes, best.core_num)


def test_the_timeline_is_the_simulators_schedule() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        ntiles, bn = int(rng.integers(1, WARMUP + 1)), int(rng.integers(1, 5))
        full = tuple(float(x) for x in rng.uniform(0.05, 2.0, 3))
        tail = tuple(float(x) for x in rng.uniform(0.01, 2.0, 3))
        spans = schedule(ntiles, full, tail, bn, ntiles)  # type: ignore[arg-type]
        assert len(spans) == 3 * ntiles
        one = tuple(np.array([x]) for x in full), tuple(np.array([x]) for x in tail)
        assert spans[-1].end_us == pipeline(np.array([ntiles]), *one, np.array([bn]))[0]  # the specification's
        for s in spans:  # a stage runs for its duration, after the one before it in its tile
            assert s.end_us > s.start_us
        for i in range(ntiles):
            a, v, o = spans[3 * i : 3 * i + 3]
            assert a.end_us <= v.start_us and v.end_us <= o.start_us


@pytest.mark.parametrize("picture", PICTURES)
def test_every_picture_draws_as_svg_and_png(picture: str) -> None:
    t = compute_tiling([129], Variant("float32", "none"), TilingParams(), "Ascend910B2", "seed")
    e = explain(t)
    svg = render(e, picture, "svg")
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg") and len(list(root.iter())) > 20
    assert render(e, picture, "svg") == svg  # no date: the same tiling draws the same bytes
    assert render(e, picture, "png").startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize(
    ("shape", "variant"),
    [
        ([0], Variant("float32", "none")),  # empty: no core, no timeline, no landscape
        ([], Variant("int16", "none")),  # a scalar tensor: one element
        ([2147483647, 2147483647], Variant("float16", "mean")),  # 2^62 elements: the timeline extrapolates
        ([7, 1000], Variant("bfloat16", "none", True, "last_dim")),
        ([7, 1000], Variant("float16", "mean", "last_dim", "last_dim")),  # a [C] weight beside a [C] pos_weight
        ([3000, 2], Variant("float32", "none", "rows")),  # [N, 1]: two elements per weight value
        ([4096, 0], Variant("float16", "none", "rows")),  # empty, with a rows weight
        ([33, 9], Variant("int32", "none", "scalar")),
        ([96, 1031], Variant("float16", "mean", "last_dim", "last_dim", "logit", "fused")),  # the fused mode
        ([5, 7], Variant("float32", "none", "rows", "full", "logit", "fused")),
    ],
)
def test_edge_shapes_explain_and_draw(shape: list[int], variant: Variant) -> None:
    t = compute_tiling(shape, variant, TilingParams(), "Ascend910B2")  # a broadcast weight's period: the last dim
    e = explain(t)
    assert len(e.core_map) == t.block_dim and (e.landscape is None) == (t.n == 0)
    assert all(tl.end_us > 0 and len(tl.spans) <= 3 * 24 for tl in e.timelines)
    for picture in PICTURES:
        assert ET.fromstring(render(e, picture, "svg")).tag.endswith("svg")
    if variant.mode == "fused":  # the UB picture shows the fused plan: the loss queue or the sum's TBuf
        names = [b[0] for b in t.kernel.ub_buffers(t.params.tile_bytes, t.params.buffer_num)]
        assert ("loss" in names) == (variant.reduction == "none") and ("loss sum" in names) != ("loss" in names)
        assert b"loss" in render(e, "ub", "svg")


def test_cli_plot_writes_the_four_pictures(tmp_path: Path) -> None:
    out = tmp_path / "pics"
    r = subprocess.run(
        [sys.executable, "-m", "model_tools", "tiling", "--shape", "129", "--dtype", "float32", "--scheme", "seed",
         "--plot", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{p}.{f}" for p in PICTURES for f in ("png", "svg"))
    blocked = tmp_path / "file"
    blocked.write_text("")
    r = subprocess.run(
        [sys.executable, "-m", "model_tools", "tiling", "--shape", "129", "--dtype", "float32", "--plot",
         str(blocked / "x")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "cannot write the pictures" in r.stderr


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server(SHIPPED_TABLES, "--reload-interval", "0")
    yield srv
    srv.stop()


def test_explain_answers_what_tiling_answers_with_the_pictures_data(server: Server) -> None:
    plain = server.post("/tiling", README_REQUEST).json()
    doc = server.post("/tiling/explain", README_REQUEST).json()
    assert doc["answer"] == plain
    e = doc["explain"]
    assert e["predicted_us"] == plain["predicted_us"] and e["params"] == plain["params"]
    assert len(e["core_map"]) == plain["block_dim"]
    assert {"core_map", "ub", "timelines", "landscape", "seed_default_us", "bottleneck"} <= set(e)


def test_plots_are_served_and_bad_requests_refused_as_tiling_refuses_them(server: Server) -> None:
    r = httpx.post(server.url + "/tiling/plot/timeline?format=svg", json=README_REQUEST, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    assert ET.fromstring(r.content).tag.endswith("svg")
    r = httpx.post(server.url + "/tiling/plot/ub?format=png", json=README_REQUEST, timeout=60)
    assert r.status_code == 200 and r.content.startswith(b"\x89PNG")
    r = httpx.post(server.url + "/tiling/plot/nope", json=README_REQUEST, timeout=60)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "picture"]
    bad = {**README_REQUEST, "shape": [-3]}
    for path in ("/tiling", "/tiling/explain", "/tiling/plot/core_map"):
        r = server.post(path, bad)
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "shape"], path
    knob = {**README_REQUEST, "params": {"tile_bytes": 100}}
    assert server.post("/tiling/explain", knob).json() == server.post("/tiling", knob).json()
    assert httpx.get(server.url + "/", follow_redirects=False).headers["location"] == "/explorer"
    page = httpx.get(server.url + "/explorer")
    assert (
        page.status_code == 200
        and "<form" in page.text
        and "http" not in page.text.split("<body>")[1].split("</body>")[0].replace("http://www.w3.org", "")
    )  # nothing fetched from outside


# ----------------------------------------------------------------------------------- the browser

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not (CHROMIUM.is_file() and DRIVER.is_file()):
        pytest.skip(f"no browser: {CHROMIUM} and {DRIVER} (Debian chromium, chromium-driver) are not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--window-size=1400,1700"):  # fmt: skip
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=DriverService(executable_path=str(DRIVER)), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _wait(driver: object, condition: str, timeout: float = 60.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(f"return {condition};")  # type: ignore[attr-defined]
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"the page never got to: {condition}")


@pytest.mark.browser
def test_the_page_shows_the_apis_answer_and_the_four_pictures(server: Server, browser: object, tmp_path: Path) -> None:
    """Also the README's screenshot: BCETUNE_SCREENSHOT_DIR=docs keeps it (docs/explorer.png)."""
    d = browser
    start = time.monotonic()
    d.get(server.url + "/explorer?shape=1024,1024&dtype=float16&reduction=mean")  # type: ignore[attr-defined]
    _wait(d, "document.body.getAttribute('data-answered')")
    answered_s = time.monotonic() - start
    want = server.post("/tiling", README_REQUEST).json()

    def text(element_id: str) -> str:
        return str(d.execute_script(f"return document.getElementById('{element_id}').textContent;"))  # type: ignore[attr-defined]

    assert text("source") == want["source"] and int(text("block_dim")) == want["block_dim"]
    for knob, value in want["params"].items():
        assert int(text(f"{knob}_out")) == value, knob
    assert float(text("predicted_us")) == pytest.approx(want["predicted_us"], abs=5e-5)
    assert float(text("roofline_us")) == pytest.approx(want["roofline_us"], abs=5e-5)
    _wait(d, "document.querySelectorAll('.pic[data-rendered]').length === 4")
    sizes = d.execute_script(  # type: ignore[attr-defined]
        "return [...document.querySelectorAll('.pic svg')].map(s => s.getBoundingClientRect().width *"
        " s.getBoundingClientRect().height);"
    )
    assert len(sizes) == 4 and all(s > 10_000 for s in sizes), sizes
    assert "shape=1024%2C1024" in str(d.execute_script("return document.getElementById('permalink').href;"))  # type: ignore[attr-defined]
    shot = Path(os.environ.get("BCETUNE_SCREENSHOT_DIR") or tmp_path) / "explorer.png"
    d.save_screenshot(str(shot))  # type: ignore[attr-defined]
    assert shot.stat().st_size > 10_000
    print(f"explorer: answer shown {answered_s:.2f} s after the page was asked for; screenshot {shot}")
    RUN["browser"] += 1


@pytest.mark.browser
def test_a_bad_field_shows_the_apis_message_beside_it(server: Server, browser: object) -> None:
    d = browser
    d.get(server.url + "/explorer?shape=-3&dtype=float32&reduction=none")  # type: ignore[attr-defined]
    msg = _wait(d, "document.getElementById('shape-error').textContent")
    want = server.post("/tiling", {"shape": [-3], "dtype": "float32", "reduction": "none"}).json()
    assert msg == want["detail"][0]["msg"]
    assert d.execute_script("return document.getElementById('result').hidden;")  # type: ignore[attr-defined]
    d.get(server.url + "/explorer?shape=4096&dtype=float32&reduction=none&tile_bytes=100")  # type: ignore[attr-defined]
    msg = _wait(d, "document.getElementById('tile_bytes-error').textContent")
    assert "tile" in str(msg)
    RUN["browser"] += 1


@pytest.mark.browser
def test_the_link_reproduces_the_view(server: Server, browser: object) -> None:
    d = browser
    d.get(server.url + "/explorer?soc=Ascend910B4&shape=3,333333&dtype=bfloat16&reduction=none&weight=false")  # type: ignore[attr-defined]
    _wait(d, "document.body.getAttribute('data-answered')")
    link = str(d.execute_script("return document.getElementById('permalink').href;"))  # type: ignore[attr-defined]
    shown = text_of(d, "predicted_us")
    d.get(link)  # type: ignore[attr-defined]
    _wait(d, "document.body.getAttribute('data-answered')")
    assert text_of(d, "predicted_us") == shown
    assert d.execute_script("return document.getElementById('soc').value;") == "Ascend910B4"  # type: ignore[attr-defined]
    want = server.post("/tiling", {"soc": "Ascend910B4", "shape": [3, 333333], "dtype": "bfloat16",
                                   "reduction": "none", "weight": False}).json()  # fmt: skip
    assert float(shown) == pytest.approx(want["predicted_us"], abs=5e-5)
    # a per-class weight typed as its shape: the view is POST /tiling's answer for weight [333333]
    d.get(server.url + "/explorer?shape=3,333333&dtype=float16&reduction=mean&weight=333333")  # type: ignore[attr-defined]
    _wait(d, "document.body.getAttribute('data-answered')")
    want = server.post("/tiling", {"shape": [3, 333333], "dtype": "float16", "reduction": "mean",
                                   "weight": [333333]}).json()  # fmt: skip
    assert want["weight"] == "last_dim" and float(text_of(d, "predicted_us")) == pytest.approx(
        want["predicted_us"], abs=5e-5
    )
    RUN["browser"] += 1


def text_of(d: object, element_id: str) -> str:
    return str(d.execute_script(f"return document.getElementById('{element_id}').textContent;"))  # type: ignore[attr-defined]


@pytest.mark.browser
def test_chromium_is_debians_not_a_download() -> None:
    """The browser comes from the distribution (`.ci/with-services.sh` installs it under CI=true)."""
    if not CHROMIUM.is_file():
        pytest.skip("no Chromium installed")
    assert shutil.which("chromium") == str(CHROMIUM)

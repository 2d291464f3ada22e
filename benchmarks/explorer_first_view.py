"""Time from starting the service to the explorer's first view, as a user of ``make run`` sees it:
a fresh ``python -m service`` on the shipped tables, then headless Chromium (Debian's, driven by
Selenium) opens ``/`` and waits for the default request's answer, then for its four pictures.

Run: ``make bench-explorer`` (``--runs N``; ``--settle S`` opens the page S seconds after the service
is healthy, once its background warm-up is done). Needs /usr/bin/chromium and /usr/bin/chromedriver.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1700")  # fmt: skip


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(driver: webdriver.Chrome, condition: str, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while not driver.execute_script(f"return {condition};"):
        if time.monotonic() - start > timeout:
            raise TimeoutError(condition)
        time.sleep(0.01)
    return time.monotonic()


def one_run(driver: webdriver.Chrome, settle: float) -> tuple[float, float, float]:
    """(service start to healthy, page asked to answer shown, page asked to four pictures) in seconds."""
    port = _port()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "service", "--port", str(port), "--log-level", "warning"])
    try:
        url = f"http://127.0.0.1:{port}"
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.02)
        healthy = time.monotonic() - t0
        time.sleep(settle)  # a user who opens the page a while after `make run` said it was up
        asked = time.monotonic()
        driver.get(url + "/")
        answered = _until(driver, "document.body.getAttribute('data-answered')") - asked
        pictures = _until(driver, "document.querySelectorAll('.pic[data-rendered]').length === 4") - asked
        return healthy, answered, pictures
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--settle", type=float, default=0.0, help="seconds between healthy and opening the page")
    a = ap.parse_args()
    if a.runs < 1 or a.settle < 0:
        print("explorer_first_view: error: --runs must be at least 1 and --settle not negative", file=sys.stderr)
        return 2
    if not (CHROMIUM.is_file() and DRIVER.is_file()):
        print(f"explorer_first_view: error: needs {CHROMIUM} and {DRIVER} (apt-get install chromium chromium-driver)",
              file=sys.stderr)  # fmt: skip
        return 2
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=DriverService(executable_path=str(DRIVER)), options=opts)
    try:
        runs = [one_run(driver, a.settle) for _ in range(a.runs)]
    finally:
        driver.quit()
    for i, (h, ans, pic) in enumerate(runs, 1):
        print(f"run {i}: service healthy {h:.2f} s after start; answer shown {ans:.2f} s, four pictures {pic:.2f} s "
              "after the page was asked for")  # fmt: skip
    answer, pictures = statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs)
    print(f"median: answer {answer:.2f} s, pictures {pictures:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Soak: minutes of wrk load on POST /tiling while the tables are rewritten, reloaded (file change
and SIGHUP) and now and then replaced by a corrupt file. Passes when no request failed and every
sampled answer is a valid tiling from the old or the new table, byte for byte.

Run: ``make soak-service`` (``--minutes`` to change the length).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_load import SHAPES, lua_script, parse, start_server  # noqa: E402

from kernel.sources import kernel_source_hash
from tiling_model import TilingParams, Variant, compute_tiling, element_count, load_soc, validate  # noqa: E402
from tiling_model.tables import TableEntry, TuningTable, write_table  # noqa: E402

VERSIONS = [
    {"block_bytes": 512, "buffer_num": 2, "tile_bytes": 8192, "core_num": 48},
    {"block_bytes": 2048, "buffer_num": 1, "tile_bytes": 4096, "core_num": 24},
]


def table(params: dict) -> TuningTable:
    entries = []
    for shape, dtype, reduction in SHAPES:
        entries.append(TableEntry(Variant(dtype, reduction), element_count(shape), params, 1.0, 1.0, 1))
    return TuningTable(
        "Ascend910B2",
        load_soc("Ascend910B2").profile_hash,
        kernel_source_hash(),
        "soak",
        "2026-11-30T00:00:00+00:00",
        1,
        tuple(entries),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=3.0)
    a = ap.parse_args()
    seconds = int(a.minutes * 60)
    with tempfile.TemporaryDirectory() as tmp:
        tables = Path(tmp) / "tables"
        path = tables / "Ascend910B2.json"
        write_table(table(VERSIONS[0]), path)
        server, url = start_server(["--tables", str(tables), "--reload-interval", "0.2"])
        try:
            bodies = [json.dumps({"shape": s, "dtype": d, "reduction": r}) for s, d, r in SHAPES]
            script = Path(tmp) / "mix.lua"
            script.write_text(lua_script(bodies))
            load = subprocess.Popen(
                ["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency", "-s", str(script), url + "/tiling"],
                stdout=subprocess.PIPE,
                text=True,
            )
            samples = wrong = rewrites = sighups = corrupt = 0
            step = 0
            end = time.monotonic() + seconds
            with httpx.Client(timeout=10) as client:
                while time.monotonic() < end:
                    step += 1
                    if step % 13 == 0:
                        path.write_text("{ corrupt")  # refused; the previous tables keep serving
                        corrupt += 1
                    else:
                        write_table(table(VERSIONS[step % 2]), path)
                        rewrites += 1
                    if step % 5 == 0:
                        os.kill(server.pid, signal.SIGHUP)
                        sighups += 1
                    for (shape, dtype, reduction), body in zip(SHAPES, bodies, strict=True):
                        r = client.post(url + "/tiling", content=body, headers={"content-type": "application/json"})
                        samples += 1
                        doc = r.json() if r.status_code == 200 else {}
                        ok = r.status_code == 200 and doc.get("params") in VERSIONS and doc.get("source") == "exact"
                        if ok:
                            t = compute_tiling(shape, Variant(dtype, reduction), TilingParams(**doc["params"]))
                            ok = validate(t) == [] and base64.b64decode(doc["tiling_b64"]) == t.to_bytes()
                        wrong += not ok
                    time.sleep(0.25)
            result = parse(load.communicate()[0])
            tables_doc = httpx.get(url + "/tables").json()
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(
        f"soak {seconds} s: wrk {result['requests']:.0f} requests at {result['rps']:.0f} req/s, "
        f"p99 {result['p99_ms']:.2f} ms, {result['errors']:.0f} errors; {rewrites} table rewrites, "
        f"{corrupt} corrupt files refused, {sighups} SIGHUPs, {tables_doc['reloads']} reloads; "
        f"{samples} sampled answers checked, {wrong} wrong"
    )
    return 0 if result["errors"] == 0 and wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

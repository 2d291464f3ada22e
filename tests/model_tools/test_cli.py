"""The tiling_model CLI through its real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiling_model import Variant, compute_tiling


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "model_tools", *args], capture_output=True, text=True, timeout=60)


def test_json_output_is_what_the_service_answers_and_the_seed_default_on_request() -> None:
    """By default the CLI tiles a call as POST /tiling does (the tables, the re-fit); --knobs seed asks
    for the seed default knobs."""
    from tiling_model.resolve import Request, Resolver, load_tables, shipped_tables_dir

    args = ("tiling", "--soc", "Ascend910B2", "--shape", "1024,1000", "--dtype", "float16", "--reduction", "mean")
    r = run(*args, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    answer = Resolver(load_tables(shipped_tables_dir())).resolve(
        Request("Ascend910B2", (1024, 1000), Variant("float16", "mean"))
    )
    assert doc["tiling"] == answer.tiling.field_dict() and list(doc["tiling"]) == list(answer.tiling.field_dict())
    assert doc["params"] == answer.tiling.params.as_dict() and answer.source == "bucket"
    assert doc["violations"] == [] and doc["predicted_us"] > 0
    seed = json.loads(run(*args, "--json", "--knobs", "seed").stdout)
    t = compute_tiling([1024, 1000], Variant("float16", "mean"))
    assert seed["tiling"] == t.field_dict() and seed["block_dim"] == t.block_dim
    assert seed["params"] != doc["params"] and seed["predicted_us"] >= doc["predicted_us"]


def test_seed_scheme_text_shows_the_out_of_bounds_finding() -> None:
    r = run("tiling", "--shape", "129", "--dtype", "float32", "--scheme", "seed")
    assert r.returncode == 0, r.stderr
    assert "out_of_bounds: 127 elements (508 B) past the end" in r.stdout
    assert "core   1 last  elements 128..255" in r.stdout


def test_overrides_reach_the_tiling() -> None:
    r = run(
        "tiling",
        "--shape",
        "100000",
        "--dtype",
        "float32",
        "--block-bytes",
        "1024",
        "--buffer-num",
        "1",
        "--tile-bytes",
        "4096",
        "--core-num",
        "5",
        "--json",
    )
    doc = json.loads(r.stdout)
    assert doc["params"] == {"block_bytes": 1024, "buffer_num": 1, "tile_bytes": 4096, "core_num": 5}
    assert doc["block_dim"] == 5 and doc["tiling"]["tileDataNum"] == 1024


def test_violations_are_reported_not_hidden() -> None:
    r = run(
        "tiling",
        "--shape",
        "100000",
        "--dtype",
        "float32",
        "--buffer-num",
        "4",
        "--tile-bytes",
        "65536",
        "--core-num",
        "99",
        "--json",
    )
    assert r.returncode == 0
    kinds = {v["kind"] for v in json.loads(r.stdout)["violations"]}
    assert kinds == {"queue_limit", "ub_overflow", "core_count"}


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--shape", "-4", "--dtype", "float32"], "shape[0] is negative"),
        (["--shape", "4,x", "--dtype", "float32"], "integers separated by ',' or 'x'"),
        (["--shape", "4", "--dtype", "float64"], "invalid choice: 'float64'"),
        (["--shape", "4", "--dtype", "int32", "--reduction", "mean"], "supports reduction 'none' only"),
        (["--shape", "4", "--dtype", "float32", "--reduction", "max"], "invalid choice: 'max'"),
        (["--shape", "4", "--dtype", "float32", "--soc", "Ascend910C"], "unknown SoC 'Ascend910C'; known: Ascend310B1"),
        (["--shape", "4", "--dtype", "float32", "--scheme", "fast"], "invalid choice: 'fast'"),
        (["--shape", "4", "--dtype", "float32", "--block-bytes", "0"], "block_bytes must be a positive integer"),
        (["--shape", "4", "--dtype", "float32", "--tile-bytes", "30"], "not a multiple of the float32 size"),
        (["--shape", "4", "--dtype", "float32", "--scheme", "seed", "--tile-bytes", "800"], "whole blocks"),
        (["--shape", "4294967296,4294967296", "--dtype", "float32"], "exceeds int64"),
    ],
)
def test_bad_input_exits_nonzero_with_one_line(args: list[str], needle: str) -> None:
    r = run("tiling", *args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""


@pytest.mark.parametrize("text", ["1024x1000", "[1024, 1000]", "1024 1000"])
def test_the_cli_takes_a_shape_as_the_explorer_does(text: str) -> None:
    """1024x1024 (the explorer's and the docs' spelling) is 1024,1024, not a refusal."""
    from model_tools.cli.args import parse_shape

    assert parse_shape(text) == parse_shape("1024,1000") == [1024, 1000]


def test_block_bytes_must_be_a_multiple_of_32() -> None:
    r = run("tiling", "--shape", "4", "--dtype", "float32", "--block-bytes", "36")
    assert r.returncode == 2 and "block_bytes=36 is not a multiple of 32" in r.stderr


def test_calibrate_names_what_it_cannot_read_or_write(tmp_path: Path) -> None:
    missing = run("calibrate", "--no-loo", "--calibration-dir", str(tmp_path / "none"))
    assert missing.returncode == 2 and "sigmoid_910b2.csv: cannot read" in missing.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    unwritable = run("calibrate", "--no-loo", "--scatter", str(blocker / "s.png"))
    assert unwritable.returncode == 2 and f"cannot write {blocker / 's.png'}" in unwritable.stderr
    assert "Traceback" not in missing.stderr + unwritable.stderr

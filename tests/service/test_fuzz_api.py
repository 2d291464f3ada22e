"""Fuzz the OpenAPI schema with schemathesis: no server errors, every response as documented."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import positive_data_acceptance

from kernel.sources import kernel_source_hash
from service.app import create_app
from service.config import Settings
from tiling_model import Variant, load_soc
from tiling_model.tables import TableEntry, TuningTable, write_table

pytestmark = pytest.mark.slow  # the app (in process) fuzzed from its OpenAPI schema

TABLES = Path(__file__).parent / ".fuzz-tables"
TABLES.mkdir(exist_ok=True)
write_table(
    TuningTable(
        "Ascend910B2",
        load_soc("Ascend910B2").profile_hash,
        kernel_source_hash(),
        "model",
        "2026-11-30T00:00:00+00:00",
        4,
        (
            TableEntry(
                Variant("float16", "mean"),
                1 << 20,
                {"block_bytes": 512, "buffer_num": 2, "tile_bytes": 8192, "core_num": 48},
                8.0,
                9.0,
                4,
            ),
        ),
    ),
    TABLES / "Ascend910B2.json",
)
app = create_app(Settings(tables_dir=TABLES, reload_interval_s=0))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
CLIENT = TestClient(app)


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case: schemathesis.Case) -> None:
    # Every check but "schema-valid data is accepted": whether fixed knobs give a valid tiling depends
    # on several fields and the SoC (UB size, queue limit), which no JSON Schema can say; such requests
    # get the documented 422 with the violations.
    case.call_and_validate(excluded_checks=[positive_data_acceptance])


# --- beyond the schema: what strict JSON cannot say, but Python's parser accepts (the service's is orjson) --
# NaN, Infinity, 1e999, integers past 64 bits and lone surrogate escapes, anywhere in a request: the
# answer is a 422 whose body is strict JSON (orjson parses it), never a 5xx.

hostile_scalars = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters(), max_size=8),
    st.booleans(),
    st.none(),
)
hostile = st.recursive(
    hostile_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "shape": hostile | st.lists(hostile, max_size=3),
        "dtype": hostile | st.sampled_from(["float16", "float32", "int16"]),
        "reduction": hostile | st.sampled_from(["none", "mean"]),
        "wrt": hostile | st.just("probability"),
        "pos_weight": hostile | st.just("last_dim"),
        "params": hostile | st.dictionaries(st.sampled_from(["tile_bytes", "core_num", "x"]), hostile, max_size=2),
        "extra": hostile,
    },
)


@given(body=fields, batch=st.booleans())
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
def test_non_finite_huge_and_surrogate_values_never_get_a_5xx(body: dict, batch: bool) -> None:
    raw = json.dumps({"requests": [body]} if batch else body, allow_nan=True)  # ensure_ascii: \\ud800 escapes
    r = CLIENT.post("/tiling/batch" if batch else "/tiling", content=raw, headers={"content-type": "application/json"})
    assert r.status_code in (200, 413, 422, 503), (raw[:300], r.status_code, r.text[:300])
    orjson.loads(r.content)  # strict JSON, whatever was sent

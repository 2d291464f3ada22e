"""tiling_model.correction: a device's knob correction travels whole (JSON, profiles, tables): the
core-count factors the sweep fits are kept, count in `identity`, and change the prediction; the fit finds
knob effects and fits nothing to noise."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiling_model import TilingParams, Variant, compute_tiling, load_soc, predict
from tiling_model.correction import (
    CORE_CLASSES,
    KnobCorrection,
    align_class,
    align_classes,
    block_class,
    block_classes,
    fit_correction,
)
from tiling_model.soc import profile_from_json, profile_to_json


def cores_only(cores: int, f: float) -> KnobCorrection:
    factors = [1.0] * CORE_CLASSES
    factors[cores] = f
    return KnobCorrection(cores=tuple(factors))


def test_a_correction_of_core_counts_alone_is_one_and_survives_json_and_profiles() -> None:
    c = cores_only(40, 1.07)
    assert not c.identity
    assert KnobCorrection.from_json(c.to_json()) == c
    soc = replace(load_soc("Ascend910B2"), knob_correction=c)
    again = profile_from_json(profile_to_json(soc))
    assert again.knob_correction == c and again.profile_hash != load_soc("Ascend910B2").profile_hash
    assert c.factor(1024, 2, 8192, 40) == pytest.approx(1.07) and c.factor(1024, 2, 8192, 39) == 1.0


def test_the_engine_applies_the_core_factor_to_configurations_on_those_cores() -> None:
    soc = load_soc("Ascend910B2")
    t = compute_tiling([1 << 22], Variant("float32", "none"), TilingParams(1024, 2, 8192, 40), soc)
    corrected = replace(soc, knob_correction=cores_only(t.block_dim, 1.07))
    assert predict(t, corrected) == pytest.approx(predict(t, soc) * 1.07, rel=1e-9)
    other = replace(soc, knob_correction=cores_only(t.block_dim - 1, 1.07))
    assert predict(t, other) == pytest.approx(predict(t, soc), rel=1e-12)


def test_a_document_from_before_core_counts_were_kept_reads_as_factors_of_one() -> None:
    old = {"block": [1.0] * 16, "buffer": [1.0, 1.1, 1.0, 1.0, 1.0], "align": [1.0] * 4}
    c = KnobCorrection.from_json(old)
    assert c.cores == (1.0,) * CORE_CLASSES and c.buffer[1] == 1.1
    with pytest.raises(ValueError, match="block, buffer, align"):
        KnobCorrection.from_json({"block": [1.0] * 16})


def _configs(rng: np.random.Generator, rows: int) -> list[tuple[int, int, int, int]]:
    return [
        (int(rng.choice([512, 2048, 8192])), int(rng.integers(1, 5)), 512 * int(rng.integers(2, 40)),
         int(rng.integers(8, 49)))
        for _ in range(rows)
    ]  # fmt: skip


@pytest.mark.parametrize("seed", range(5))
def test_noise_alone_fits_no_correction(seed: int) -> None:
    """Residuals of pure noise (sd 0.02) over 12 keys: every factor is 1 (the fit without the held-out
    check gave factors off 1 to noise alone)."""
    rng = np.random.default_rng(seed)
    configs = _configs(rng, 240)
    keys = [f"k{i % 12}" for i in range(240)]
    assert fit_correction(configs, rng.normal(0.0, 0.02, 240), keys).identity


def test_a_knob_effect_under_noise_is_found() -> None:
    rng = np.random.default_rng(7)
    configs = _configs(rng, 400)
    keys = [f"k{i % 20}" for i in range(400)]
    effect = {1: 0.10, 2: 0.0, 3: 0.0, 4: -0.04}  # BUFFER_NUM 1 10% slow, 4 4% fast
    c = fit_correction(configs, [effect[bn] + rng.normal(0.0, 0.01) for _, bn, _, _ in configs], keys)
    b = [math.log(c.buffer[i]) for i in range(1, 5)]
    assert b[0] - b[1] == pytest.approx(0.10, abs=0.02) and b[3] - b[1] == pytest.approx(-0.04, abs=0.02)


def test_a_profile_document_is_its_own_copy() -> None:
    """A device table writes its fit into the document's sources: the cached shipped profile it came from
    must not change with it (it did: a later `calibrate --write` in the same process wrote the device's
    sources into the shipped profile)."""
    shipped = load_soc("Ascend910B2")
    before = json.dumps(profile_to_json(shipped), sort_keys=True)
    doc = profile_to_json(shipped)
    doc["sources"]["hbm_gbps"] = "fitted on a device"
    doc["calibration"]["intervals"]["all"][0] = 0.0
    assert json.dumps(profile_to_json(load_soc("Ascend910B2")), sort_keys=True) == before


@given(st.lists(st.integers(0, 1 << 40), min_size=1, max_size=50))
def test_the_classes_of_a_whole_space_are_each_configurations_own(values: list[int]) -> None:
    """A race classes its key's whole space at once (block_classes, align_classes): the same classes as one
    at a time, at every power of two and next to it."""
    edges = [v for e in range(41) for v in ((1 << e) - 1, 1 << e, (1 << e) + 1, 512 * ((1 << e) + 1))]
    x = np.array(values + edges, dtype=np.int64)
    assert block_classes(x).tolist() == [block_class(int(v)) for v in x]
    assert align_classes(x).tolist() == [align_class(int(v)) for v in x]

"""tiling_model.correction: a device's knob correction travels whole (JSON, profiles, tables): the
core-count factors the sweep fits are kept, count in `identity`, and change the prediction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tiling_model import TilingParams, Variant, compute_tiling, load_soc, predict
from tiling_model.correction import CORE_CLASSES, KnobCorrection
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

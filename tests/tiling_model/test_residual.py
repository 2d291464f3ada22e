"""The learned residual over the realised tiling: its features by hand, and what its fit does and does not
learn (a planted effect, pure noise, a key's level)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from tiling_model import BadRequest, TilingParams, Variant, compute_tiling, engine, load_soc, predict, residual
from tiling_model.cost import engine_kinds
from tiling_model.residual import (
    BY_TILE_TOO,
    FEATURES,
    INTERACTION_WEIGHTS,
    KEY_PENALTY,
    NONE,
    OFFSETS,
    PENALTIES,
    WIDTH,
    Residual,
    _drop_each,
    _fold_sse,
    _folds,
    _kept,
    _penalties,
    _solve,
    _system,
    design,
    fit_residual,
    levels,
    summary_line,
)
from tiling_model.soc import profile_from_json, profile_to_json, rehashed

COL = {name: j for j, (name, _) in enumerate(FEATURES)}


def _one(n: int, elem: int, block: int, bn: int, tile: int, cores: int) -> dict[str, int]:
    lv = levels(n, elem, np.array([block]), np.array([bn]), np.array([tile]), np.array([cores]))
    return {name: int(lv[0, j]) for name, j in COL.items()}


def test_levels_by_hand() -> None:
    """1,000,000 float32 elements, 512-B blocks, two buffers, 8.5 KiB tiles, 48 cores."""
    n, tile = 1_000_000, 8704
    k = engine.core_kinds(n, 4, np.array([512]), np.array([2]), np.array([tile]), np.array([48]))
    used = int(k.block_dim[0])
    got = _one(n, 4, 512, 2, tile, 48)
    assert got["buffer_num"] == 2
    assert got["block_class"] == 9  # 2 ** 9 = 512
    assert got["cores"] == used and got["cores_odd_x_buffers"] == (used % 2) * 5 + 2
    assert got["tile_align"] == 0  # 8704 = 17 x 512: no larger divisor among 1, 2, 4, 8 KiB
    assert got["tile_in_page_x_buffers"] == 1 * 5 + 2  # 8704 mod 8192 = 512: one 512-B step into a page
    assert got["tile_size"] == 13  # 2 ** 13 <= 8704 < 2 ** 14
    slowest = int(np.argmax(np.where(k.cores[0] > 0, k.tiles[0], -1)))
    tiles, tail_bytes = int(k.tiles[0, slowest]), int(k.tail[0, slowest]) * 4
    expect_tail = max([i for i, g in enumerate((1, 32, 512, 1024, 2048, 4096, 8192)) if tail_bytes % g == 0])
    assert got["tail_align"] == expect_tail
    assert 1 <= tiles <= 32  # each count to 32 its own level
    assert got["tiles_x_buffers"] == (tiles - 1) * 5 + 2


def test_every_level_is_inside_its_table() -> None:
    rng = np.random.default_rng(0)
    m = 400
    block = rng.choice([32, 64, 512, 4096, 16384], m)
    bn = rng.integers(1, 5, m)
    tile = 512 * rng.integers(1, 300, m)
    cores = rng.integers(1, 49, m)
    for n in (1, 777, 2**20 + 3, 2**26):
        lv = levels(n, 2, block, bn, tile, cores)
        for j, (_, count) in enumerate(FEATURES):
            assert lv[:, j].min() >= 0 and lv[:, j].max() < count
        x = design(lv)
        assert x.shape == (m, WIDTH) and np.all(x.sum(axis=1) == len(FEATURES))


def _data(
    seed: int, keys: int = 12, per_key: int = 40, effect: float = 0.0
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Random configurations of ``keys`` sizes, 1% noise, a level per key, and ``effect`` on the configurations
    whose copy sits one 512-B step into an 8 KiB page with two buffers."""
    rng = np.random.default_rng(seed)
    lvs, names, ys = [], [], []
    for k in range(keys):
        n = int(rng.integers(2**14, 2**24))
        block = rng.choice([256, 512, 1024, 2048], per_key)
        bn = rng.integers(1, 5, per_key)
        tile = 512 * rng.integers(1, 200, per_key)
        cores = rng.integers(8, 49, per_key)
        lv = levels(n, 4, block, bn, tile, cores)
        hit = lv[:, COL["tile_in_page_x_buffers"]] == 1 * 5 + 2
        y = rng.normal(0.0, 0.01, per_key) + 0.3 * rng.normal() + effect * hit
        lvs.append(lv)
        names += [f"key{k}"] * per_key
        ys.append(y)
    return np.vstack(lvs), names, np.concatenate(ys)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_noise_alone_fits_no_residual(seed: int) -> None:
    lv, keys, y = _data(seed)
    r = fit_residual(lv, keys, y)
    assert r.identity and r.held_out_rms == r.held_out_rms_none
    assert np.all(r.factors(lv) == 1.0)


def test_a_planted_effect_is_learnt_and_a_keys_level_is_not() -> None:
    lv, keys, y = _data(4, keys=20, per_key=80, effect=0.06)
    r = fit_residual(lv, keys, y)
    assert not r.identity and r.held_out_rms < r.held_out_rms_none
    level = OFFSETS[COL["tile_in_page_x_buffers"]] + 1 * 5 + 2
    assert math.exp(r.beta[level]) == pytest.approx(math.exp(0.06), abs=0.02)
    hit = lv[:, COL["tile_in_page_x_buffers"]] == 7
    f = r.factors(lv)
    assert np.median(f[hit]) / np.median(f[~hit]) == pytest.approx(math.exp(0.06), abs=0.015)
    # the keys' own levels (0.3 in log) went to the keys' columns, not into the features
    assert max(abs(b) for b in r.beta) < 0.15
    assert "tile_in_page_x_buffers" in r.summary()["factors"]  # type: ignore[operator]


def test_the_fit_leaves_out_the_features_that_fit_only_noise_and_keeps_the_planted_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Effects by the tiles per core (with the buffer count) and by the copy's place in the page: the held-out keys
    keep those two features and leave out most of the rest (their levels would fit the noise); a feature left out
    has factors of 1, and the held-out error the fit reports (without them) is under the grid's best (with all)."""
    lv, keys, y = _data(8, keys=20, per_key=80, effect=0.05)
    rng = np.random.default_rng(8)
    tiles_effect = rng.normal(0.0, 0.03, 200)  # per tiles-per-core level, each buffer count its own
    y = y + tiles_effect[lv[:, COL["tiles_x_buffers"]]]
    grid_sses: list[list[float]] = []

    def held_out(folds: object, penalties: list[np.ndarray]) -> list[float]:
        sses = _fold_sse(folds, penalties)  # type: ignore[arg-type]
        grid_sses.append(sses)
        return sses

    monkeypatch.setattr(residual, "_fold_sse", held_out)
    r = fit_residual(lv, keys, y)
    assert "tiles_x_buffers" not in r.dropped and "tile_in_page_x_buffers" not in r.dropped
    assert "buffer_num" not in r.dropped  # it carries the level across keys
    assert len(r.dropped) >= 6, r.dropped
    for name in r.dropped:
        j = COL[name]
        assert not any(r.beta[OFFSETS[j] : OFFSETS[j] + FEATURES[j][1]])
    best_with_every = math.sqrt(min(grid_sses[0][1:]) / y.size)  # (no case left out as an outlier here)
    assert r.held_out_rms < best_with_every < r.held_out_rms_none
    assert Residual.from_json(json.loads(json.dumps(r.to_json()))) == r
    assert "left out by held-out keys: " + ", ".join(r.dropped) in summary_line(r.summary())


def test_each_features_drop_from_one_inverse_is_the_solve_without_it() -> None:
    """``_drop_each`` (each candidate's solution from one inverse per fold) equals a solve without its columns."""
    from scipy import sparse

    lv, keys, y = _data(9, keys=10, per_key=40, effect=0.05)
    g = np.asarray(keys, dtype=object)
    folds = _folds(sparse.csr_matrix(design(lv)), g, y)
    penalty = _penalties(30 * 1e-4, 3.0)
    for dropped in ((), (COL["cores"], COL["tile_size"])):
        candidates = [j for j in range(len(FEATURES)) if j not in dropped]
        got = _drop_each(folds, penalty, dropped, candidates)
        want = [sum(f.sse(f.x @ _solve(*f.system, penalty, _kept([*dropped, j]))) for f in folds) for j in candidates]
        np.testing.assert_allclose(got, want, rtol=1e-9)
        assert len(set(np.round(want, 12))) > len(candidates) // 2  # the candidates' errors differ: a real check


def test_the_penalty_and_the_interactions_weight_are_the_held_out_keys_best(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both chosen together by held-out keys: the pick is the grid's least held-out error (ties: the stronger
    penalty), and the interaction features carry the weight the fit reports."""
    lv, keys, y = _data(6, keys=12, per_key=60, effect=0.06)
    y = y + 0.04 * (lv[:, COL["tile_size"]] >= 14)  # an effect by class beside the interaction's
    seen: list[tuple[list[np.ndarray], list[float]]] = []

    def held_out(folds: object, penalties: list[np.ndarray]) -> list[float]:
        sses = _fold_sse(folds, penalties)  # type: ignore[arg-type]
        seen.append((penalties, sses))
        return sses

    monkeypatch.setattr(residual, "_fold_sse", held_out)
    r = fit_residual(lv, keys, y)
    penalties, (_, *sses) = seen[0]  # the grid's (the features' choice follows, at the pick)
    grid = [(p, w) for w in INTERACTION_WEIGHTS for p in PENALTIES]
    assert len(set(INTERACTION_WEIGHTS)) > 1 and len(penalties) == len(grid)
    unit = penalties[0][0] / PENALTIES[0]  # the residuals' robust variance: the penalties' scale
    for (p, w), pen in zip(grid, penalties, strict=True):  # each column's: p times the scale, w more on "_x_"
        for (name, count), off in zip(FEATURES, OFFSETS, strict=True):
            assert np.allclose(pen[off : off + count], p * unit * (w if "_x_" in name else 1.0))
    assert (r.penalty, r.interaction_weight) == min(zip(grid, sses, strict=True), key=lambda c: (c[1], -c[0][0]))[0]
    assert Residual.from_json(json.loads(json.dumps(r.to_json()))) == r


def test_the_keys_levels_solved_out_give_the_ridge_with_a_column_per_key() -> None:
    """``_system`` solves each key's level out (its Schur complement); the features' part is the one of ridge on
    the indicator columns and one barely penalised column per key, solved whole, at any penalty."""
    from scipy import sparse

    lv, keys, y = _data(7, keys=9, per_key=30, effect=0.05)
    x = design(lv)
    g = np.asarray(keys, dtype=object)
    ids, index = np.unique(g, return_inverse=True)
    whole = np.hstack([x, np.eye(ids.size)[index]])
    used = np.flatnonzero(whole.any(axis=0))
    for penalty, weight in ((3.0, 1.0), (300.0, 3.0)):
        pen = np.concatenate([_penalties(penalty * 1e-4, weight), np.full(ids.size, KEY_PENALTY)])[used]
        part = whole[:, used]
        beta = np.zeros(whole.shape[1])
        beta[used] = np.linalg.solve(part.T @ part + np.diag(pen), part.T @ y)
        got = _solve(*_system(sparse.csr_matrix(x), g, y), _penalties(penalty * 1e-4, weight))
        assert np.abs(beta[:WIDTH]).max() > 0.01  # the planted effect is there to find
        np.testing.assert_allclose(got, beta[:WIDTH], rtol=0, atol=1e-10)


def test_too_few_keys_fit_nothing() -> None:
    lv, keys, y = _data(5, keys=3, effect=0.1)
    assert fit_residual(lv, keys, y) is NONE


def test_the_floor_is_under_every_factor_of_its_buffers_and_cores() -> None:
    lv, keys, y = _data(6, keys=12, per_key=60, effect=0.06)
    r = fit_residual(lv, keys, y)
    assert not r.identity
    rng = np.random.default_rng(1)
    m = 2000
    space = levels(3_000_017, 4, rng.choice([512, 2048], m), rng.integers(1, 5, m), 512 * rng.integers(1, 200, m),
                   rng.integers(1, 49, m))  # fmt: skip
    f, floor = r.factors(space), r.floor_factors(space)
    assert np.all(floor <= f * (1 + 1e-12))
    by_tile = r.floor_factors(space, BY_TILE_TOO)  # knowing more of a range: a floor as low or higher
    assert np.all(floor <= by_tile * (1 + 1e-12)) and np.all(by_tile <= f * (1 + 1e-12))
    assert np.any(by_tile > floor)
    # the least factor of a (buffers, cores) group is at or above its floor, and the floor is one it shares
    key = space[:, COL["buffer_num"]] * 100 + space[:, COL["cores"]]
    for g in np.unique(key)[:20]:
        assert len(set(floor[key == g])) == 1


def _spec_levels(
    n: int, elem: int, block: np.ndarray, bn: np.ndarray, tile: np.ndarray, cores: np.ndarray
) -> np.ndarray:
    """The features as written in NumPy over the engine's core kinds: the specification the engine's
    residual::LevelsOf is checked against."""

    def align(nbytes: np.ndarray, grains: tuple[int, ...]) -> np.ndarray:
        out = np.zeros(nbytes.shape, dtype=np.int64)
        for i, g in enumerate(grains, start=1):
            out = np.where(nbytes % g == 0, i, out)
        return out

    k = engine.core_kinds(n, elem, block, bn, tile, cores)
    used, bnc, rows = k.block_dim, np.clip(bn, 0, 4), np.arange(len(block))
    slowest = np.argmax(np.where(k.cores > 0, k.tiles, -1), axis=1)
    tiles = np.maximum(k.tiles[rows, slowest], 0)
    tile_align = align(tile, (1024, 2048, 4096, 8192))
    size = np.clip(np.floor(np.log2(np.maximum(tile, 1))).astype(np.int64), 0, 18)
    tiles_bin = np.searchsorted(np.array((*range(1, 33), 40, 48, 64, 96, 128)), tiles, side="left")
    tail_align = align(k.tail[rows, slowest] * elem, (32, 512, 1024, 2048, 4096, 8192))
    aligned = np.all(k.aligned | (k.cores == 0), axis=1)
    cols = (bnc, np.clip(np.floor(np.log2(np.maximum(block, 1))).astype(np.int64), 0, 15), np.clip(used, 0, 64),
            (used % 2) * 5 + bnc, tile_align, tile_align * 5 + bnc, ((tile % 8192) // 512) * 5 + bnc, size,
            size * 5 + bnc, tail_align, tail_align * 38 + tiles_bin, tiles_bin * 5 + bnc,
            aligned.astype(np.int64) * 5 + bnc,
            (k.cores[:, 1] > 0).astype(np.int64) * 2 + (k.cores[:, 2] > 0).astype(np.int64))  # fmt: skip
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("n", [1, 33, 4097, 1_000_003, 2**24, 3 * 2**25 + 5])
@pytest.mark.parametrize("elem", [2, 4])
def test_the_engine_levels_equal_the_specification(n: int, elem: int) -> None:
    rng = np.random.default_rng(n + elem)
    m = 500
    block = rng.choice([32, 64, 256, 512, 1024, 4096, 16384], m).astype(np.int64)
    bn = rng.integers(1, 5, m)
    tile = 512 * rng.integers(1, 400, m)
    cores = rng.integers(1, 65, m)
    assert np.array_equal(levels(n, elem, block, bn, tile, cores), _spec_levels(n, elem, block, bn, tile, cores))


def test_bad_knobs_are_named() -> None:
    one = np.array([1], dtype=np.int64)
    with pytest.raises(ValueError, match="block and tile >= elem_bytes, core_num >= 1"):
        levels(100, 4, one * 512, one, one * 512, one * 0)
    with pytest.raises(ValueError, match="the same length"):
        levels(100, 4, np.array([512, 512]), one, one * 512, one)


def _drawn(seed: int, sd: float = 0.05) -> Residual:
    rng = np.random.default_rng(seed)
    return Residual(tuple(float(b) for b in rng.normal(0, sd, WIDTH)), 30.0, 3.0, 0.01, 0.02)


def test_a_profile_carries_its_residual_through_json_and_its_hash() -> None:
    soc = load_soc("Ascend910B2")
    with_residual = rehashed(replace(soc, residual=_drawn(1)))
    back = profile_from_json(json.loads(json.dumps(profile_to_json(with_residual))))
    assert back.residual == with_residual.residual and back.profile_hash == with_residual.profile_hash
    assert with_residual.profile_hash != soc.profile_hash
    assert "residual" not in profile_to_json(soc)  # the shipped profiles carry none
    older = profile_to_json(with_residual)
    del older["residual"]["dropped"]  # a profile written before the fit chose its features
    back = profile_from_json(older)
    assert back.residual == with_residual.residual and back.residual.dropped == ()


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ([], "log_factors"),
        ({"log_factors": {"buffer_num": [0.0] * 5}}, "must name the features"),
        ({"log_factors": {name: [0.0] * (count + (name == "cores")) for name, count in FEATURES}}, "'cores' needs 65"),
        ({"log_factors": {name: [0.0] * count for name, count in FEATURES}, "dropped": ["core"]}, "names no feature"),
        ({"log_factors": {name: [0.0] * count for name, count in FEATURES}, "dropped": "cores"}, "list of feature"),
    ],
)
def test_a_bad_residual_document_is_named(doc: object, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Residual.from_json(doc)
    raw = profile_to_json(load_soc("Ascend910B2")) | {"residual": doc}
    with pytest.raises(BadRequest, match="not a SoC profile"):
        profile_from_json(raw)


def test_a_predictions_factor_is_its_levels_factors_multiplied_in_order() -> None:
    """What every prediction of bcetune's kernel carries (engine ConfigFactor, no knob correction): the
    residual's factors of the configuration's levels, multiplied in feature order; another kernel none."""
    soc = replace(load_soc("Ascend910B2"), residual=_drawn(2))
    t = compute_tiling([1_000_003], Variant("float16", "none", "full"), TilingParams(2048, 2, 9216, 37), soc)
    lv = levels(t.n, 2, np.array([2048]), np.array([2]), np.array([9216]), np.array([37]))[0]
    want = 1.0
    for j, off in enumerate(OFFSETS):
        want *= math.exp(soc.residual.beta[off + lv[j]])
    assert engine.config_factor(t.kernel, soc, engine_kinds(t), 2048, 2, 9216) == want
    shipped = predict(t, load_soc("Ascend910B2"))
    assert predict(t, soc) == shipped * want
    seed = compute_tiling([1_000_003], Variant("float16", "none", "full"), TilingParams(), soc, "seed")
    assert predict(seed, soc) == predict(seed, load_soc("Ascend910B2"))


def test_the_summary_line_says_what_was_learnt_or_that_nothing_was() -> None:
    assert summary_line(NONE.summary()).startswith("none")
    beta = [0.0] * WIDTH
    beta[OFFSETS[FEATURES.index(("cores", 65))] + 47] = math.log(1.04)
    line = summary_line(Residual(tuple(beta), 30.0, 3.0, 0.01, 0.02).summary())
    assert line.startswith("1 levels moved (largest: cores[47] x1.04)") and "rms 0.01 (none: 0.02)" in line

"""Sizes that teach most (tuner.explore): a sweep of powers of four never measures what sizes between them
realise; the sizes it adds reach levels of the residual its measurements never did, and ship as entries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from model_tools.calibrate import Measured, case_levels
from tiling_model import SocProfile, Variant, load_soc
from tiling_model.residual import FEATURES
from tuner.explore import (
    OFFSETS,
    STEPS,
    Choice,
    candidates,
    choose,
    level_counts,
    likely_levels,
    novelty,
    shared_trials,
)
from tuner.key import StudyKey
from tuner.storage import open_storage
from tuner.sweep import run_sweep
from tuner.synthetic import SyntheticBackend, SyntheticDevice

SOC = load_soc("Ascend910B2")
GRID = [StudyKey(SOC.name, Variant("float32", "none", "full"), n) for n in (4**8, 4**9, 4**10)]


def test_the_shared_budget_keeps_trials_times_studies() -> None:
    assert shared_trials(20, 120, 30) == 13  # 120 x (20 + 15) = 150 x (13 + 15): a key's race costs ~15 trials
    assert shared_trials(20, 120, 0) == 20
    assert shared_trials(1, 3, 100) == 1


def test_candidates_lie_between_the_keys_and_are_none_of_them() -> None:
    got = candidates(GRID)
    sizes = {k.size for k in got}
    assert sizes == {round(k.size * s) + d for k in GRID for s in STEPS for d in OFFSETS
                     if GRID[0].size <= round(k.size * s) + d <= GRID[-1].size} - {k.size for k in GRID}  # fmt: skip
    assert all(k.variant == GRID[0].variant for k in got) and got == candidates(list(reversed(GRID)))


def test_novelty_falls_as_a_levels_measurements_grow() -> None:
    lv = likely_levels(GRID[0], SOC)
    empty = level_counts(np.zeros((0, len(FEATURES)), dtype=np.int64))
    assert novelty(lv, empty) == pytest.approx(len(FEATURES))  # nothing measured: every level unknown
    seen = level_counts(lv, 10.0)
    assert novelty(lv, seen) < novelty(lv, level_counts(lv, 1.0)) < len(FEATURES)


@pytest.mark.slow
def test_a_sweep_adds_sizes_that_reach_levels_its_grid_never_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three powers of four on a stand-in device whose effects follow the realised tiling, then two sizes
    between them: the first one chosen is the candidate whose likely configurations the grid's measurements
    say least about (on the model the sweep had then), here one with a level no grid measurement had (a
    misaligned last copy, an odd tiles-per-core count: what sizes between powers of four realise), and the
    candidates differ, so another choice fails; both ship as entries of the table, every study at the shared
    budget."""
    import tuner.sweep

    seen: list[tuple[list[Measured], SocProfile]] = []

    def recorded(
        keys: list[StudyKey], measured: list[Measured], profile: SocProfile, count: int, trials: int
    ) -> list[Choice]:
        seen.append((list(measured), profile))
        return choose(keys, measured, profile, count, trials)

    monkeypatch.setattr(tuner.sweep, "choose", recorded)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    backend = SyntheticBackend(SyntheticDevice(SOC, seed=3, shape="realised"), seed=2)
    trials = shared_trials(8, len(GRID), 2)
    table = run_sweep(GRID, backend, storage, trials, tmp_path / "t.json", False, explore=2)
    extra = [e for e in table.entries if e.size not in {k.size for k in GRID}]
    assert len(table.entries) == len(GRID) + 2 and len(extra) == 2
    assert {e.size for e in extra} <= {k.size for k in candidates(GRID)}
    ((measured, profile),) = seen
    assert {m.launches[0].n for m in measured} == {k.size for k in GRID}  # chosen on the grid's measurements
    counts = level_counts(case_levels(measured))
    score = {k.size: novelty(likely_levels(k, profile), counts) for k in candidates(GRID)}
    assert score[extra[0].size] == max(score.values()) > min(score.values())
    lv = likely_levels(StudyKey(SOC.name, GRID[0].variant, extra[0].size), profile)
    assert any(counts[j][lv[i, j]] == 0 for i in range(lv.shape[0]) for j in range(len(FEATURES)))


def test_exploring_needs_a_device_loop(tmp_path: Path) -> None:
    from tuner.backends import ModelBackend

    storage = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    with pytest.raises(ValueError, match="explore needs the device loop"):
        run_sweep(GRID, ModelBackend(), storage, 4, None, False, explore=1)


def test_choose_counts_each_choice_before_the_next() -> None:
    """With nothing measured, the first choice is wholly novel; each one chosen counts as measured, so the
    next realises levels it did not, and what is left to learn only falls."""
    chosen = choose(GRID, [], SOC, 3, 50)
    assert len({c.key for c in chosen}) == 3
    assert chosen[0].novelty == pytest.approx(len(FEATURES))
    assert chosen[0].novelty > chosen[1].novelty >= chosen[2].novelty
    first, second = (likely_levels(c.key, SOC) for c in chosen[:2])
    assert {tuple(r) for r in second} - {tuple(r) for r in first}


@pytest.mark.slow
def test_the_cli_shares_the_budget_and_says_what_it_explored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tuner.cli import main

    args = ["sweep", "--soc", "Ascend910B2", "--dtypes", "float32", "--reductions", "none", "--weights", "none",
            "--sizes", "65536,1048576", "--trials", "8", "--storage", f"sqlite:///{tmp_path / 's.db'}",
            "--no-progress", "--out", str(tmp_path / "t.json")]  # fmt: skip
    assert main([*args, "--backend", "synthetic", "--seed", "3", "--explore", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 entries, 1 of them sizes between the keys (--explore), 1 trial each" in out  # 2 x (8 + 15) ~ 3 x (1 + 15)
    assert main([*args, "--explore", "1", "--storage", f"sqlite:///{tmp_path / 'm.db'}"]) == 2  # the model backend
    assert "explore needs the device loop" in capsys.readouterr().err


def test_a_sweep_without_explore_does_not_resume_studies_made_with_it(tmp_path: Path) -> None:
    """``explore`` is stored only where it is set (so older studies resume): absent, it is 0 on either side, and
    a study made with ``--explore 2`` is refused by name to a sweep without it, and the other way round."""
    from tuner.sweep import SweepSettingsMismatch, check_resumable, sweep_settings

    key = StudyKey("Ascend910B2", Variant("float32", "none", "none"), 65536)
    store = open_storage(f"sqlite:///{tmp_path / 'studies.db'}")
    plain, explored = sweep_settings(6, "synthetic", seed=3), sweep_settings(6, "synthetic", seed=3, explore=2)
    study = optuna.create_study(storage=store, study_name=key.study_name("synthetic"))
    study.set_user_attr("sweep", explored)
    with pytest.raises(SweepSettingsMismatch, match=r"explore=2 \(this run: 0\)"):
        check_resumable(store, [key], "synthetic", plain, "here")
    assert check_resumable(store, [key], "synthetic", explored, "here") == (0, 1)
    study.set_user_attr("sweep", plain)
    with pytest.raises(SweepSettingsMismatch, match=r"explore=0 \(this run: 2\)"):
        check_resumable(store, [key], "synthetic", explored, "here")
    assert check_resumable(store, [key], "synthetic", plain, "here") == (0, 1)

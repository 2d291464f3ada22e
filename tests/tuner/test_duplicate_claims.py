"""Two workers proposing one configuration at once time it once (tuner.study._claim_or_reuse), and a
race's key is raced by the worker that created its study only.

The interleavings that matter are forced here, one at a time, on one in-memory study: the
two-worker PostgreSQL test (test_postgres_sweep.py) meets them only by chance."""

from __future__ import annotations

import threading
import time

import optuna
import pytest

from tiling_model import Variant, load_soc
from tuner import study as study_mod
from tuner.key import StudyKey
from tuner.study import CONFIG_ATTR, MEASURING_ATTR, KeyBusy, _claim_or_reuse, tune
from tuner.synthetic import SyntheticBackend, SyntheticDevice

CONFIG = [512, 2, 12288, 40]
OTHER = [1024, 2, 12288, 40]


@pytest.fixture()
def study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study()


class Claim(threading.Thread):
    """_claim_or_reuse in a thread, as a second worker would run it."""

    def __init__(self, trial: optuna.Trial, study: optuna.Study) -> None:
        super().__init__(daemon=True)
        self.trial, self.study = trial, study
        self.result: float | None | str = "not returned"

    def run(self) -> None:
        self.result = _claim_or_reuse(self.trial, self.study, CONFIG)


def test_a_lower_twin_waits_for_a_higher_one_already_measuring(study: optuna.Study) -> None:
    low, high = study.ask(), study.ask()
    high.set_user_attr(CONFIG_ATTR, CONFIG)
    assert _claim_or_reuse(high, study, CONFIG) is None  # nobody else yet: it measures
    low.set_user_attr(CONFIG_ATTR, CONFIG)
    waiter = Claim(low, study)
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive(), "the lower-numbered twin claimed a configuration being measured"
    study.tell(high, 7.5)
    waiter.join(5)
    assert waiter.result == 7.5 and low.user_attrs["duplicate_of"] == high.number


def test_a_higher_twin_waits_for_a_lower_one(study: optuna.Study) -> None:
    low, high = study.ask(), study.ask()
    low.set_user_attr(CONFIG_ATTR, CONFIG)  # written, not yet claimed
    high.set_user_attr(CONFIG_ATTR, CONFIG)
    waiter = Claim(high, study)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    assert _claim_or_reuse(low, study, CONFIG) is None
    study.tell(low, 3.0)
    waiter.join(5)
    assert waiter.result == 3.0


def test_a_twin_that_appears_between_look_and_claim_goes_first(
    study: optuna.Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the PostgreSQL test once lost: the higher trial looked, found nobody, and the lower
    one wrote its configuration before the higher one started timing. The higher one yields."""
    low, high = study.ask(), study.ask()
    high.set_user_attr(CONFIG_ATTR, CONFIG)
    original = high.set_user_attr

    def claim_late(key: str, value: object) -> None:
        if key == MEASURING_ATTR and value is True and CONFIG_ATTR not in low.user_attrs:
            low.set_user_attr(CONFIG_ATTR, CONFIG)  # the lower twin writes just before the claim lands
        original(key, value)

    monkeypatch.setattr(high, "set_user_attr", claim_late)
    waiter = Claim(high, study)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive(), "the higher trial timed a configuration a lower twin had proposed"
    assert _claim_or_reuse(low, study, CONFIG) is None
    study.tell(low, 4.0)
    waiter.join(5)
    assert waiter.result == 4.0 and high.user_attrs[MEASURING_ATTR] is False


def test_other_configurations_and_failed_twins_do_not_hold_a_trial_back(study: optuna.Study) -> None:
    other, failed, mine = study.ask(), study.ask(), study.ask()
    other.set_user_attr(CONFIG_ATTR, OTHER)
    other.set_user_attr(MEASURING_ATTR, True)
    failed.set_user_attr(CONFIG_ATTR, CONFIG)
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    mine.set_user_attr(CONFIG_ATTR, CONFIG)
    assert _claim_or_reuse(mine, study, CONFIG) is None


def test_a_dead_claimant_is_waited_for_only_so_long(study: optuna.Study, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(study_mod, "DUPLICATE_WAIT_S", 0.3)
    dead, mine = study.ask(), study.ask()
    dead.set_user_attr(CONFIG_ATTR, CONFIG)
    dead.set_user_attr(MEASURING_ATTR, True)  # its worker was killed: it stays RUNNING
    mine.set_user_attr(CONFIG_ATTR, CONFIG)
    assert _claim_or_reuse(mine, study, CONFIG) is None
    assert mine.user_attrs[MEASURING_ATTR] is True


def test_a_completed_trial_of_an_older_sweep_is_reused_by_its_knob_attrs(study: optuna.Study) -> None:
    old = study.ask()
    for name, value in zip(("block_bytes", "buffer_num", "tile_bytes", "core_num"), CONFIG, strict=True):
        old.set_user_attr(name, value)
    study.tell(old, 9.0)
    mine = study.ask()
    mine.set_user_attr(CONFIG_ATTR, CONFIG)
    assert _claim_or_reuse(mine, study, CONFIG) == 9.0


# --- keys: a race's study is claimed by its creator -------------------------------------------------


def _race_key() -> tuple[StudyKey, SyntheticBackend]:
    soc = load_soc("Ascend910B2")
    return StudyKey(soc.name, Variant("float16", "none", "none"), 20000), SyntheticBackend(SyntheticDevice(soc, seed=4))


def test_a_study_seen_before_its_creators_first_heartbeat_is_left_to_its_creator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race the two-worker device-loop test once lost: a worker found the study its peer had just
    created, before the peer's first heartbeat, took it for an abandoned one and raced the key too."""
    key, backend = _race_key()
    storage = optuna.storages.InMemoryStorage()
    created = optuna.create_study(study_name=key.study_name(backend.name), storage=storage)  # a peer, mid-setup
    threading.Timer(0.3, lambda: created.set_user_attr("heartbeat", time.time())).start()
    start = time.monotonic()
    with pytest.raises(KeyBusy):
        tune(key, backend, storage, 4, strategy="race")
    assert time.monotonic() - start >= 0.25  # it waited for the heartbeat rather than racing at once
    assert not created.trials


def test_a_study_whose_creator_died_before_its_first_heartbeat_is_taken_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(study_mod, "CREATING_GRACE_S", 0.3)
    key, backend = _race_key()
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(study_name=key.study_name(backend.name), storage=storage)  # its creator died here
    entry = tune(key, backend, storage, 4, strategy="race")
    assert entry.trials >= 1 and entry.size == key.size


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")  # ask() outside optimize, as a worker's trial
def test_a_dead_claimant_is_failed_by_its_silent_heartbeat_and_a_live_one_is_waited_for(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a storage with heartbeats, a killed worker's claimed trial (its heartbeat silent) is failed after the
    grace period and the waiting trial measures; a live claimant (its heartbeat going) is waited for to its
    value, past the grace period. DUPLICATE_WAIT_S (120 s) is not what ends the wait."""
    from tuner import storage as storage_module
    from tuner.storage import open_storage

    monkeypatch.setattr(storage_module, "HEARTBEAT_S", 1)
    monkeypatch.setattr(storage_module, "GRACE_S", 2)
    st = open_storage(f"sqlite:///{tmp_path}/claims.db")
    shared = optuna.create_study(study_name="claims", storage=st)
    dead = shared.ask()
    dead.set_user_attr(CONFIG_ATTR, CONFIG)
    dead.set_user_attr(MEASURING_ATTR, True)
    st.record_heartbeat(dead._trial_id)  # its first heartbeat, then its worker was killed
    mine = shared.ask()
    mine.set_user_attr(CONFIG_ATTR, CONFIG)
    stop = threading.Event()
    others = {dead.number}  # trials this worker does not run: it never beats for them

    def own_heartbeats() -> None:  # what Optuna's heartbeat thread does for the trials this worker runs
        while not stop.is_set():
            for t in shared.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                if t.number not in others:
                    st.record_heartbeat(t._trial_id)
            time.sleep(0.3)

    threading.Thread(target=own_heartbeats, daemon=True).start()
    t0 = time.monotonic()
    assert _claim_or_reuse(mine, shared, CONFIG) is None  # it measures
    assert 1.5 < time.monotonic() - t0 < 10
    assert shared.get_trials(deepcopy=False)[dead.number].state == optuna.trial.TrialState.FAIL

    live, waiting = shared.ask(), shared.ask()
    others.add(live.number)  # its own worker beats for it (below)
    live.set_user_attr(CONFIG_ATTR, OTHER)
    live.set_user_attr(MEASURING_ATTR, True)
    waiting.set_user_attr(CONFIG_ATTR, OTHER)

    def beat() -> None:  # a live worker: heartbeats every 0.3 s, its value after 4 s
        end = time.monotonic() + 4
        while time.monotonic() < end:
            st.record_heartbeat(live._trial_id)
            time.sleep(0.3)
        shared.tell(live, 7.0)

    threading.Thread(target=beat, daemon=True).start()
    t0 = time.monotonic()
    assert _claim_or_reuse(waiting, shared, OTHER) == 7.0  # its value, reused
    assert time.monotonic() - t0 >= 3.5
    stop.set()

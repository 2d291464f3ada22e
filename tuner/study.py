"""Tune one (SoC, variant, size) key with an Optuna study.

The study lives in Optuna's RDB storage under a name derived from the key, so an
interrupted sweep resumes where it stopped and finished studies are not run again.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace

import numpy as np
import optuna
from optuna.trial import TrialState

from tiling_model import (
    InvalidTiling,
    MeasurementError,
    SocProfile,
    TilingData,
    TilingParams,
    compute_tiling,
    load_soc,
    predict,
    validate,
)
from tiling_model.tables import TableEntry
from tiling_model.tiling import KNOB_NAMES
from tuner.backends import Backend
from tuner.key import StudyKey
from tuner.learning import PRIOR_SIGMA, DeviceModel, key_attrs
from tuner.protocol import (
    Measurement,
    MeasurementProtocol,
    measure,
    needs_flush,
    race_samples,
    remeasure_interleaved,
    statistically_tied,
    summarise,
)
from tuner.race import Entrant, RacePlan, entrant_of, search
from tuner.records import RecordLog
from tuner.storage import fail_stale_trials
from tuner.trial_attrs import CONFIG_ATTR, MEASURED_ATTR, knobs_of, measured_attr, measurement_of, trial_attrs
from tuner.trial_space import TrialSpace

#: The model's best configurations enqueued as the first trials after the seed default.
MODEL_SEEDS = 3
#: The most configurations --strategy exact measures for a key (the default and the model's MODEL_SEEDS best).
EXACT_TRIALS = MODEL_SEEDS + 1


class InvalidConfiguration(InvalidTiling):
    """A proposed configuration failed ``validate``: a bug in the search space."""


def _params_of(trial: optuna.trial.FrozenTrial) -> tuple[int, int, int, int]:
    knobs = knobs_of(trial)
    if knobs is None:
        raise MeasurementError(f"trial {trial.number} holds no configuration (state {trial.state.name})")
    return knobs


DUPLICATE_WAIT_S = 120.0
POLL_S = 0.05
#: How often a trial waiting on a same-config claimant asks the storage whether the claimant's worker died.
STALE_CHECK_S = 1.0
#: Set by a trial once it has claimed its configuration and is about to time it.
MEASURING_ATTR = "measuring"


def _same_config(study: optuna.Study, number: int, real: tuple[int, ...]) -> list[optuna.trial.FrozenTrial]:
    """The other completed or running trials of this study with this configuration."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
        if t.number != number and knobs_of(t) == real
    ]


def _claim_or_reuse(trial: optuna.Trial, study: optuna.Study, config: list[int]) -> float | None:
    """Claim this configuration for timing (None), or return the value of the trial that timed it.

    Two workers may propose one configuration at the same moment. Each has written ``config``
    before it looks; a trial waits while a same-config trial is measuring or has a lower number;
    once it may go it writes ``measuring`` and looks again, and yields to any lower-numbered
    same-config trial it now sees. With every write visible to the reads after it (one database),
    two trials never both time one configuration: of two, the later to look sees the other. A
    claimant that died (a killed worker's trial, left RUNNING) is failed once its heartbeat has been
    silent for the storage's grace period (``tuner.storage.fail_stale_trials``, asked every
    STALE_CHECK_S) and no longer waited for; where the storage keeps no heartbeats, it is waited for at
    most DUPLICATE_WAIT_S (a resumed sweep on PostgreSQL waited those 120 s for its killed run's trial)."""
    real = tuple(config)
    deadline = time.monotonic() + DUPLICATE_WAIT_S
    check = time.monotonic() + STALE_CHECK_S
    while time.monotonic() < deadline:
        others = _same_config(study, trial.number, real)
        done = [t for t in others if t.state == TrialState.COMPLETE and t.value is not None]
        if done:
            first = min(done, key=lambda t: t.number)
            trial.set_user_attr("duplicate_of", first.number)
            return first.value
        if any(t.number < trial.number or t.user_attrs.get(MEASURING_ATTR) for t in others):
            if time.monotonic() >= check:
                fail_stale_trials(study)  # a dead claimant leaves the RUNNING trials _same_config reads
                check = time.monotonic() + STALE_CHECK_S
            time.sleep(POLL_S)
            continue
        trial.set_user_attr(MEASURING_ATTR, True)
        if not any(t.number < trial.number for t in _same_config(study, trial.number, real)):
            return None
        trial.set_user_attr(MEASURING_ATTR, False)  # a lower-numbered twin appeared: it goes first
    trial.set_user_attr(MEASURING_ATTR, True)
    return None


def _objective(  # noqa: ANN202
    key: StudyKey,
    space: TrialSpace,
    backend: Backend,
    study: optuna.Study,
    protocol: MeasurementProtocol,
    records: RecordLog | None,
):
    def objective(trial: optuna.Trial) -> float:
        params = space.suggest(trial)
        t = compute_tiling([key.size], key.variant, params, space.soc)
        violations = validate(t, space.soc)
        if violations:
            raise InvalidConfiguration(f"{key}: {params} -> {[v.kind for v in violations]}")
        real = (t.params.block_bytes, t.params.buffer_num, t.params.tile_bytes, t.params.core_num)
        trial.set_user_attr(CONFIG_ATTR, list(real))  # (trial_attrs: one write, read whole or not at all)
        # A configuration already measured in this study is not measured again (_claim_or_reuse).
        reused = _claim_or_reuse(trial, study, list(real))
        if reused is not None:
            return reused
        predicted = predict(t, space.soc)
        try:
            m = measure(backend, t, protocol)
        except MeasurementError as e:  # a kernel fault or timeout: this trial fails, the sweep goes on
            trial.set_user_attr("error", str(e))
            raise
        trial.set_user_attr(MEASURED_ATTR, measured_attr(m, predicted))
        if records is not None:
            records.write(key, backend.name, t, m, predicted)
        return m.median_us

    return objective


def robust_order(knobs: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """How ties are resolved, toward where a model or timing error costs least on real hardware:
    double buffering first (buffer_num >= 2, fewest such), then larger tiles (few fixed DMA
    costs), then more cores (bandwidth headroom)."""
    _, bn, tile, cores = knobs
    return (bn < 2, bn, -tile, -cores)


def counted_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's completed trials that make its entry: its first ``trials`` (the study's "trials" attr)
    by number. Workers sharing a study can each start a trial the moment before it has enough (Optuna's
    MaxTrialsCallback counts, it does not lock): the ones past the count are measured and kept, but every
    worker builds the entry from the same ``trials`` trials."""
    done = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.number)
    wanted = study.user_attrs.get("trials")
    return done[:wanted] if isinstance(wanted, int) and wanted > 0 else done


#: How many times one ``tune`` call runs the study again for the trials of workers that died meanwhile.
MAX_RESUMES = 4


def _wait_for_running(study: optuna.Study, trials: int, limit_s: float = 600.0) -> int:
    """Until the study has ``trials`` completed trials or none running (another worker's last trial): then
    every worker reads the same first ``trials``. A trial whose worker died (killed mid-trial: Optuna leaves
    it RUNNING) stops its heartbeat, or never wrote one, and is failed after the storage's grace period
    (``tuner.storage.fail_stale_trials``), so it is waited for at most that long; a live one however long it
    takes (up to ``limit_s``). Returns how many dead workers' trials it failed."""
    deadline = time.monotonic() + limit_s
    failed = 0
    while time.monotonic() < deadline:
        failed += len(fail_stale_trials(study))  # a no-op on storages without heartbeats
        got = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
        if sum(t.state == TrialState.COMPLETE for t in got) >= trials:
            return failed
        if not any(t.state == TrialState.RUNNING for t in got):
            return failed
        time.sleep(0.2)
    return failed


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial:
    """Fastest trial, preferring the seeded ones (the default and the model's picks, enqueued first):
    a searched trial wins only by beating every seeded one by more than 0.1%. Trials within 0.1% of
    the fastest are tied and resolved by ``robust_order``, then the faster, then the earlier trial.
    So the same study run by one worker or several, whatever the interleaving, picks the same."""
    done = counted_trials(study)
    seeded = [t for t in done if "fixed_params" in t.system_attrs]
    pool = done
    if seeded:
        best_seeded = min(value_of(t) for t in seeded)
        pool = seeded if all(value_of(t) >= best_seeded * 0.999 for t in done) else done
    chosen = robust_pick([(_params_of(t), value_of(t)) for t in pool])
    return pool[chosen]


def robust_pick(candidates: list[tuple[tuple[int, int, int, int], float]]) -> int:
    """The index of the (knobs, time) to keep: those within 0.1% of the fastest are tied and resolved by
    ``robust_order``, then the faster, then the earlier."""
    fastest = min(us for _, us in candidates)
    tied = [i for i, (_, us) in enumerate(candidates) if us <= fastest * 1.001]
    return min(tied, key=lambda i: (*robust_order(candidates[i][0]), candidates[i][1], i))


def value_of(trial: optuna.trial.FrozenTrial) -> float:
    """The objective value of a completed trial (Optuna types it optional: only finished trials have one)."""
    if trial.value is None:
        raise MeasurementError(f"trial {trial.number} has no value (state {trial.state.name})")
    return float(trial.value)


def confirm_winner(
    study: optuna.Study, key: StudyKey, space: TrialSpace, backend: Backend, protocol: MeasurementProtocol
) -> tuple[optuna.trial.FrozenTrial, float, float]:
    """Winner, its time and spread. A timed backend re-measures the top candidates interleaved;
    candidates statistically tied with the fastest are resolved by ``robust_order``. The
    re-measurements are stored with the study (user attr ``confirm``)."""
    if backend.deterministic:
        best = best_trial(study)
        return best, value_of(best), 0.0
    done = [t for t in counted_trials(study) if "duplicate_of" not in t.user_attrs]
    top = sorted(done, key=lambda t: (value_of(t), t.number))[: protocol.confirm_top]
    tilings = [compute_tiling([key.size], key.variant, TilingParams(*_params_of(t)), space.soc) for t in top]
    ms = remeasure_interleaved(backend, tilings, protocol)
    study.set_user_attr("confirm", {str(t.number): m.as_attrs() for t, m in zip(top, ms, strict=True)})
    fastest = min(ms, key=lambda m: m.median_us)
    tied = [(t, m) for t, m in zip(top, ms, strict=True) if statistically_tied(m, fastest)]
    winner, wm = min(tied, key=lambda tm: (*robust_order(_params_of(tm[0])), tm[1].median_us, tm[0].number))
    return winner, wm.median_us, wm.iqr_us


def seed_default_tiling(key: StudyKey, soc: SocProfile) -> TilingData:
    """The seed default: the requirement's default knobs (block 512, 2 buffers where the queue
    limit allows, the largest tile, all cores) on bcetune's kernel. One meaning on every backend:
    it is the first trial of every study, so a tuned entry is never slower than it (but for the
    0.1% tie band). The requirement's own tiling and kernel is a different baseline
    (``--scheme seed``; ``tuner report`` prints its model time beside it)."""
    return compute_tiling([key.size], key.variant, None, soc)


def requirement_tiling(key: StudyKey, soc: SocProfile) -> TilingData | None:
    """What the requirement's own code runs for this key (its tiling and kernel, ``--scheme seed``),
    or None where it does not compute the variant (pos_weight, wrt=probability, the fused mode). It always reads
    weight. Model time only: it overflows the usable UB or reads past the tensors, so it is never timed."""
    v = key.variant
    if v.pos_weight != "none" or v.wrt != "logit" or v.mode != "grad":
        return None
    return compute_tiling([key.size], replace(v, weight="full"), None, soc, "seed")


SEED_WAIT_S = 5.0


def _ensure_seeded(study: optuna.Study, seeds: list[dict[str, float | int]]) -> None:
    """A creator killed while seeding leaves its study short of seeds. Give a live creator a few
    seconds to finish, then enqueue the seeds still missing, so an interrupted sweep resumes to
    the same table as an uninterrupted one."""
    deadline = time.monotonic() + SEED_WAIT_S
    while True:
        if "seeded" in study.user_attrs:
            return
        present = [t.system_attrs.get("fixed_params") for t in study.get_trials(deepcopy=False)]
        missing = [p for p in seeds if p not in present]
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    for point in missing:
        study.enqueue_trial(point)
    study.set_user_attr("seeded", True)


class _Patience:
    """Stop a study when its best value has not improved for ``trials`` completed trials."""

    def __init__(self, trials: int) -> None:
        self.trials = trials

    def __call__(self, study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not done:
            return
        best = min(done, key=lambda t: (value_of(t), t.number))
        if sum(t.number > best.number for t in done) >= self.trials:
            study.stop()


def tune(
    key: StudyKey,
    backend: Backend,
    storage: optuna.storages.BaseStorage | str,
    trials: int,
    protocol: MeasurementProtocol | None = None,
    patience: int = 0,
    records: RecordLog | None = None,
    model: DeviceModel | None = None,
    strategy: str = "auto",
    plan: RacePlan | None = None,
    settings: dict[str, object] | None = None,
) -> TableEntry:
    """Run (or resume) the study of ``key`` up to ``trials`` measured configurations; return its entry.
    ``settings``: the sweep's (``tuner.sweep.sweep_settings``), stored with a study it creates.

    ``strategy``: ``race`` (timed backends' default: the device model's candidates raced under noise,
    then TPE; ``model``: what the sweep has learnt of the device, the shipped profile without one) or
    ``tpe`` (the model backend's default: the seed default and the model's 3 best, then TPE; with
    ``patience`` > 0 it stops when the best has not improved for that many trials)."""
    if strategy == "auto":
        strategy = "tpe" if backend.deterministic else "race"
    if strategy == "race":
        return _tune_race(
            key, backend, storage, trials, protocol or MeasurementProtocol(), records, model, plan, settings
        )
    if strategy == "exact":
        return _tune_exact(key, backend, storage, protocol or MeasurementProtocol(), records, settings)
    if strategy != "tpe":
        raise ValueError(f"unknown strategy {strategy!r}: race, tpe or exact")
    protocol = protocol or MeasurementProtocol()
    soc = load_soc(key.soc)
    space = TrialSpace(soc, key.variant)
    sampler = optuna.samplers.TPESampler(seed=key.seed(), multivariate=True, n_startup_trials=10)
    seeds = [space.default_point(), *space.model_best_points(key.size, MODEL_SEEDS)]
    try:  # creating the study is atomic in the database: only its creator seeds it
        study = optuna.create_study(
            study_name=key.study_name(backend.name), storage=storage, sampler=sampler, direction="minimize"
        )
        for point in seeds:
            study.enqueue_trial(point)
        study.set_user_attr("key", key_attrs(key))
        study.set_user_attr("trials", trials)
        if settings is not None:
            study.set_user_attr("sweep", settings)
        study.set_user_attr("seeded", True)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=key.study_name(backend.name), storage=storage, sampler=sampler)
        _ensure_seeded(study, seeds)
        if study.user_attrs.get("trials") != trials:  # resumed for another count (the CLI refuses that)
            study.set_user_attr("trials", trials)
    for _ in range(MAX_RESUMES):
        remaining = trials - len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
        if remaining > 0:
            # several workers share the study: stop when the study, not this worker, has enough trials
            enough = optuna.study.MaxTrialsCallback(trials, states=(TrialState.COMPLETE, TrialState.RUNNING))
            study.optimize(
                _objective(key, space, backend, study, protocol, records),
                n_trials=remaining,
                catch=(MeasurementError,),
                callbacks=[enough] + ([_Patience(patience)] if patience > 0 else []),
            )
        if patience > 0 or not _wait_for_running(study, trials):
            break  # else a dead worker's trial was counted as running and is failed now: run its share
    best, tuned_us, spread_us = confirm_winner(study, key, space, backend, protocol)
    seed_tiling = seed_default_tiling(key, soc)
    params = dict(zip(KNOB_NAMES, _params_of(best), strict=True))
    return TableEntry(
        variant=key.variant,
        size=key.size,
        params=params,
        tuned_us=round(tuned_us, 4),
        seed_default_us=round(measure(backend, seed_tiling, protocol).median_us, 4),
        trials=len(counted_trials(study)),
        spread_us=round(spread_us, 4),
    )


def _tune_exact(
    key: StudyKey,
    backend: Backend,
    storage: optuna.storages.BaseStorage | str,
    protocol: MeasurementProtocol,
    records: RecordLog | None,
    settings: dict[str, object] | None,
) -> TableEntry:
    """A deterministic backend's key: the configurations TPE is seeded with (the default and the model's
    MODEL_SEEDS best, the whole space scored at once) measured once each, the pick by ``best_trial``'s rule
    (the fastest; those within 0.1% of it by ``robust_order``). On the model backend TPE never beat these seeds
    (all 7,590 entries of the five tables it made, the same knobs and times), so its trials only confirmed them.
    Stored as the study's ``entry`` with its measurements as trials: a resumed sweep reads it back."""
    if not backend.deterministic:
        raise ValueError(f"--strategy exact measures each configuration once: the {backend.name} backend is noisy, "
                         "and one sample is not its truth (race or tpe)")  # fmt: skip
    soc = load_soc(key.soc)
    space = TrialSpace(soc, key.variant)
    name = key.study_name(backend.name)
    try:
        study = optuna.create_study(study_name=name, storage=storage, direction="minimize")
        study.set_user_attr("key", key_attrs(key))
        study.set_user_attr("strategy", "exact")
        if settings is not None:
            study.set_user_attr("sweep", settings)
    except optuna.exceptions.DuplicatedStudyError:  # resumed, or another worker's: the same answer either way
        study = optuna.load_study(study_name=name, storage=storage)
        if "entry" in study.user_attrs:
            return entry_from_attrs(key, study.user_attrs["entry"])
    before: dict[tuple[int, int, int, int], float] = {}  # what a stopped run of this key measured (they stand)
    for done in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        stored = measurement_of(done)
        if (knobs := knobs_of(done)) is not None and stored is not None:
            before[knobs] = stored.median_us
    dists = space.distributions()
    measured: dict[tuple[int, int, int, int], float] = {}  # in seed order (the default may be a model pick)
    for point in [space.default_point(), *space.model_best_points(key.size, MODEL_SEEDS)]:
        t = compute_tiling([key.size], key.variant, space.params_of(point), soc)
        knobs = (t.params.block_bytes, t.params.buffer_num, t.params.tile_bytes, t.params.core_num)
        if knobs in measured:
            continue
        if knobs in before:
            measured[knobs] = before[knobs]
            continue
        predicted = predict(t, soc)
        m = measure(backend, t, protocol)
        study.add_trial(optuna.trial.create_trial(params=point, distributions=dists, value=m.median_us,
                                                  user_attrs=trial_attrs(knobs, m, predicted)))  # fmt: skip
        if records is not None:
            records.write(key, backend.name, t, m, predicted)
        measured[knobs] = m.median_us
    pick = list(measured)[robust_pick(list(measured.items()))]
    entry = TableEntry(
        variant=key.variant,
        size=key.size,
        params=dict(zip(KNOB_NAMES, pick, strict=True)),
        tuned_us=round(measured[pick], 4),
        seed_default_us=round(measure(backend, seed_default_tiling(key, soc), protocol).median_us, 4),
        trials=len(measured),
        spread_us=0.0,
    )
    study.set_user_attr("entry", entry.to_json())
    return entry


#: A race's worker that has not measured for this long is taken to be gone: another takes its key over
#: (resuming from its trials).
STALE_S = 600.0


class KeyBusy(RuntimeError):
    """Another worker is racing this key now; its entry will be in the study when it is done."""


#: How long a study without a heartbeat is taken to be one its creator is still setting up.
CREATING_GRACE_S = 30.0


def _heartbeat(study: optuna.Study) -> float:
    """The race's last heartbeat (time.time()). Creating a study and writing its first heartbeat are two
    storage calls: a study seen between them has none yet, and is waited on (up to CREATING_GRACE_S) so
    that it is not taken for an abandoned one and raced by a second worker (0.0 after the grace: its
    creator died between the two calls)."""
    deadline = time.monotonic() + CREATING_GRACE_S
    while True:
        attrs = study.user_attrs
        if "heartbeat" in attrs or "entry" in attrs or time.monotonic() >= deadline:
            return float(attrs.get("heartbeat", 0.0))
        time.sleep(0.1)


def wait_for_entry(
    key: StudyKey, backend_name: str, storage: optuna.storages.BaseStorage | str, poll_s: float = 2.0
) -> bool:
    """Wait until the worker racing ``key`` has stored its entry (True) or has stopped beating (False:
    take the key over)."""
    study = optuna.load_study(study_name=key.study_name(backend_name), storage=storage)
    while True:
        attrs = study.user_attrs
        if "entry" in attrs:
            return True
        if time.time() - attrs.get("heartbeat", 0.0) >= STALE_S:
            return False
        time.sleep(poll_s)


def _worker() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _knob_text(e: Entrant) -> str:
    return "/".join(map(str, e.key))


def _tune_race(
    key: StudyKey,
    backend: Backend,
    storage: optuna.storages.BaseStorage | str,
    trials: int,
    protocol: MeasurementProtocol,
    records: RecordLog | None,
    model: DeviceModel | None,
    plan: RacePlan | None,
    settings: dict[str, object] | None = None,
) -> TableEntry:
    """``tune`` with the race (tuner.race) on a timed backend. Each configuration's first measurement is a
    trial of the key's study (its samples, the shipped model's and the device model's predictions beside
    it); the race's further samples and the entry are stored with the study, so a finished key is never
    timed again and every worker reads the same. The study records how many keys the device model it was
    raced on had been fitted on (``model_keys``: what ``look_again`` asks)."""
    model = model or DeviceModel(load_soc(key.soc), PRIOR_SIGMA)
    name = key.study_name(backend.name)
    try:
        study = optuna.create_study(study_name=name, storage=storage, direction="minimize")
        study.set_user_attr("heartbeat", time.time())  # first: a study without one is read as being created
        study.set_user_attr("key", key_attrs(key))
        study.set_user_attr("strategy", "race")
        study.set_user_attr("model_keys", model.keys)
        if settings is not None:
            study.set_user_attr("sweep", settings)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage)
        if "entry" not in study.user_attrs and time.time() - _heartbeat(study) < STALE_S:
            raise KeyBusy(name) from None  # another worker is racing it: come back for its entry
    if "entry" in study.user_attrs:
        return entry_from_attrs(key, study.user_attrs["entry"])
    return _KeyRace(key, backend, study, protocol, records, model, plan).run(trials)


class _KeyRace:
    """One key's race in its study: the configurations it measured before (with every sample the race took
    of them), a new one measured as a trial of the study (and recorded), and the entry stored at the end."""

    def __init__(
        self,
        key: StudyKey,
        backend: Backend,
        study: optuna.Study,
        protocol: MeasurementProtocol,
        records: RecordLog | None,
        model: DeviceModel,
        plan: RacePlan | None,
        claim: optuna.Study | None = None,
    ) -> None:
        """``claim``: a second look's claim study, which beats with the key's (its waiters read it)."""
        self.key, self.backend, self.study, self.protocol, self.records = key, backend, study, protocol, records
        self.beating = [study] if claim is None else [study, claim]
        self.model, self.plan = model, plan or RacePlan()
        self.soc = load_soc(key.soc)
        self.space = TrialSpace(self.soc, key.variant)
        self.dists = self.space.distributions()
        if "entry" not in study.user_attrs:  # (a second look says who looked in its own record)
            study.set_user_attr("owner", _worker())  # the worker racing it (ops)
        study.set_user_attr("heartbeat", time.time())
        raced = study.user_attrs.get("race", {})  # a finished race's samples, by configuration
        self.known: dict[tuple[int, ...], Entrant] = {}
        # each known configuration's samples so far and its predictions; a finished race (what a second look
        # races again) wrote their records, an interrupted one (resumed here) did not
        self.before: dict[tuple[int, ...], tuple[int, float, float | None]] = {}
        self.recorded_before = "entry" in study.user_attrs
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            knobs, m = knobs_of(t), measurement_of(t)
            if knobs is not None and m is not None:
                e = entrant_of(self.space, key.size, TilingParams(*knobs), m.samples)
                e.samples = list(raced.get(_knob_text(e), e.samples))
                self.known[e.key] = e
                self.before[e.key] = (len(e.samples), m.predicted_us, m.predicted_device_us)
        self.to_record: dict[tuple[int, ...], tuple[TilingData, Measurement, float, float]] = {}

    def measure_new(self, params: TilingParams) -> Entrant | None:
        key, space, study = self.key, self.space, self.study
        t = compute_tiling([key.size], key.variant, params, self.soc)
        violations = validate(t, self.soc)
        if violations:
            raise InvalidConfiguration(f"{key}: {params} -> {[v.kind for v in violations]}")
        e = entrant_of(space, key.size, params, [])
        if e.key in self.known:
            return self.known[e.key]
        shipped, on_device = predict(t, self.soc), predict(t, self.model.profile)
        try:
            samples = race_samples(self.backend, t, self.plan.first_samples, self.protocol.warmup, self.soc)
        except MeasurementError as err:
            failed = {CONFIG_ATTR: list(e.key), "error": str(err)}
            point = space.point_of(e.params)
            study.add_trial(optuna.trial.create_trial(params=point, distributions=self.dists, state=TrialState.FAIL,
                                                      user_attrs=failed))  # fmt: skip
            return None
        e.samples = samples
        for beating in self.beating:  # this worker is alive and on the key
            beating.set_user_attr("heartbeat", time.time())
        m = summarise(samples, self.protocol.outlier_mads)
        attrs = trial_attrs(e.key, m, shipped, on_device)
        study.add_trial(optuna.trial.create_trial(params=space.point_of(e.params), distributions=self.dists,
                                                  value=m.median_us, user_attrs=attrs))  # fmt: skip
        self.to_record[e.key] = (t, m, shipped, on_device)
        self.known[e.key] = e
        return e

    def run(self, trials: int, before: list[Entrant] | None = None) -> TableEntry:
        """Race to ``trials`` configurations measured (``before``: those measured earlier count), store and
        return the entry."""
        key, soc, study = self.key, self.soc, self.study
        leader, measured, in_band = search(self.space, key.size, self.model, trials, self.measure_new, self.backend,
                                           key.seed(), self.plan, self.protocol.warmup,
                                           lambda e: needs_flush(e.tiling, soc), before or [])  # fmt: skip
        study.set_user_attr("race", {_knob_text(e): e.samples for e in measured})
        if self.records is not None:  # after the race: each record holds every sample the learner will fit to
            for e in measured:
                if e.key in self.to_record:
                    tiling, first, predicted, device = self.to_record[e.key]
                    self.records.write(key, self.backend.name, tiling, first, predicted, predicted_device_us=device,
                                       raced=e.samples)  # fmt: skip
                elif e.key in self.before and (not self.recorded_before or len(e.samples) > self.before[e.key][0]):
                    _, shipped, on_device = self.before[e.key]  # (again: a look sampled it further)
                    self.records.write(key, self.backend.name, e.tiling, None, shipped, predicted_device_us=on_device,
                                       raced=e.samples, again=self.recorded_before)  # fmt: skip
            raced = {e.key for e in measured}
            for e in [] if self.recorded_before else [e for e in self.known.values() if e.key not in raced]:
                # an interrupted race's, which this one did not race again: its first measurement
                _, shipped, on_device = self.before[e.key]
                self.records.write(key, self.backend.name, e.tiling, summarise(e.samples, self.protocol.outlier_mads),
                                   shipped, predicted_device_us=on_device)  # fmt: skip
        default = entrant_of(self.space, key.size, self.space.default_params(), [])
        seed_us = (
            self.known[default.key].median()
            if default.key in self.known
            else measure(self.backend, default.tiling, self.protocol).median_us
        )
        q1, q3 = np.percentile(leader.samples, [25, 75])
        entry = TableEntry(
            variant=key.variant,
            size=key.size,
            params=dict(zip(KNOB_NAMES, leader.key, strict=True)),
            tuned_us=round(leader.median(), 4),
            seed_default_us=round(seed_us, 4),
            trials=len(measured),
            spread_us=round(float(q3 - q1), 4),
        )
        study.set_user_attr("entry", entry.to_json() | {"band": in_band})
        return entry


def look_due(model: DeviceModel | None, plan: RacePlan | None) -> int:
    """Trials a key raced now keeps for its second look (``look_again``): ``plan.second_look`` while the device
    model is fitted on fewer than ``plan.settled_keys`` keys, else 0."""
    plan = plan or RacePlan()
    keys = model.keys if model is not None else 0
    return plan.second_look if keys < plan.settled_keys else 0


def look_again(
    key: StudyKey,
    backend: Backend,
    storage: optuna.storages.BaseStorage | str,
    trials: int,
    model: DeviceModel,
    protocol: MeasurementProtocol | None = None,
    records: RecordLog | None = None,
    plan: RacePlan | None = None,
) -> TableEntry | None:
    """A second look at a raced key whose race ran on a device model fitted on fewer than
    ``plan.settled_keys`` keys (its study's ``model_keys``): the configurations it measured stay, ``model``
    (the whole sweep's) proposes the rest up to ``trials`` measured in all, the race picks among them all, and
    the study's entry is replaced. Its first race kept those trials (``look_due``): the budget is the key's.
    Done once (the study's ``second_look``; a key looked at before answers its entry as it stands); a key whose
    model had settled is not looked at (None). Several workers: the first to create the study ``<key's
    study>/look`` looks; the others wait for its result (or take over once it stops beating, as a race's key
    is taken over)."""
    plan = plan or RacePlan()
    name = key.study_name(backend.name)
    study = optuna.load_study(study_name=name, storage=storage)
    attrs = study.user_attrs
    settled = attrs.get("model_keys", plan.settled_keys) >= plan.settled_keys  # (studies from before: settled)
    if "entry" not in attrs or settled or plan.second_look <= 0:
        return None
    if "second_look" in attrs:  # looked at before (by this sweep, resumed, or another worker): its entry now
        return entry_from_attrs(key, attrs["entry"])
    try:
        claim = optuna.create_study(study_name=f"{name}/look", storage=storage)
    except optuna.exceptions.DuplicatedStudyError:
        claim = optuna.load_study(study_name=f"{name}/look", storage=storage)
        while "second_look" not in study.user_attrs:
            if time.time() - float(claim.user_attrs.get("heartbeat", 0.0)) >= STALE_S:
                break  # its worker went away: look here
            time.sleep(2.0)
        else:
            return entry_from_attrs(key, study.user_attrs["entry"])
    claim.set_user_attr("heartbeat", time.time())
    race = _KeyRace(key, backend, study, protocol or MeasurementProtocol(), records, model, plan, claim)
    old = study.user_attrs["entry"]
    if trials - len(race.known) <= 0:
        study.set_user_attr("second_look", {"model_keys": model.keys, "trials": 0, "before": old["params"]})
        return entry_from_attrs(key, old)
    entry = race.run(trials, before=list(race.known.values()))
    look = {"model_keys": model.keys, "trials": entry.trials - int(old["trials"]), "before": old["params"],
            "owner": _worker()}  # fmt: skip
    study.set_user_attr("second_look", look)
    return entry


def entry_from_attrs(key: StudyKey, doc: dict) -> TableEntry:
    """A finished race's entry as stored with its study."""
    return TableEntry(key.variant, key.size, dict(doc["params"]), doc["tuned_us"], doc["seed_default_us"],
                      doc["trials"], doc["spread_us"])  # fmt: skip

"""``python -m tuner sweep``: tune every key of one SoC and write its table."""

from __future__ import annotations

import datetime as dt
import platform
import sys
from collections.abc import Iterable
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import optuna
from tqdm import tqdm

from kernel.sources import kernel_source_hash
from model_tools.calibrate import FOLDS
from tiling_model import SocProfile, Variant, load_soc, valid_combinations
from tiling_model.dtypes import FLOAT_DTYPES
from tiling_model.errors import TableError
from tiling_model.soc import profile_from_json
from tiling_model.tables import TableEntry, TuningTable, write_table
from tuner.backends import Backend, ModelBackend
from tuner.device_time import DeviceClock, estimate
from tuner.explore import choose
from tuner.gate import GateFailure, check_tiling
from tuner.key import StudyKey
from tuner.learning import Learner, device_profile_document
from tuner.protocol import MeasurementProtocol, measure
from tuner.race import SECOND_LOOK, RacePlan
from tuner.records import RecordLog
from tuner.study import KeyBusy, look_again, look_due, seed_default_tiling, tune, wait_for_entry

#: Representative element counts: powers of four from 1 Ki to 1 Gi elements.
DEFAULT_SIZES = tuple(4**k for k in range(5, 16))
DEFAULT_TRIALS = 32
#: Shipped tables live inside the service package (package data).
TABLES_DIR = Path(__file__).resolve().parent.parent / "service" / "tables"


def sweep_keys(
    soc: str,
    dtypes: Iterable[str],
    reductions: Iterable[str],
    weights: Iterable[str | bool],
    sizes: Iterable[int],
    pos_weights: Iterable[str] = ("none",),
    wrts: Iterable[str] = ("logit",),
    modes: Iterable[str] = ("grad",),
) -> list[StudyKey]:
    """Every supported key; unsupported combinations (int sum/mean, pos_weight with wrt=probability,
    int with wrt=probability, the fused mode of an int or wrt=probability) are skipped, not tuned."""
    wanted_d, wanted_r = set(dtypes), set(reductions)
    combos = [(d, r) for d, r in valid_combinations() if d in wanted_d and r in wanted_r]
    variants = [(p, w) for w in wrts for p in pos_weights if p == "none" or w == "logit"]
    return [
        StudyKey(soc, Variant(d, r, w, p, wrt, mode), s)  # type: ignore[arg-type]
        for mode in modes
        for d, r in combos
        for p, wrt in variants
        if (wrt == "logit" or d in FLOAT_DTYPES) and (mode == "grad" or (wrt == "logit" and d in FLOAT_DTYPES))
        for w in weights
        for s in sorted(set(sizes))
    ]


def calibration_summary(soc: SocProfile) -> dict[str, Any] | None:
    """What the table's predictions rest on: the profile's fit, if it has one."""
    cal = soc.calibration
    if not cal:
        return None
    keys = ("measured_on", "data", "cases", "operators", "median", "loo_median", "loo_p90", "fitted")
    out = {k: cal[k] for k in keys if k in cal}
    if "median" not in out and "median_abs_rel_error" in cal:  # a profile fitted to your own records
        out["median"] = cal["median_abs_rel_error"]
    return out


def software_versions(backend: str) -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("bcetune", "optuna", "numpy") + (("torch", "torch_npu") if backend == "npu" else ()):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def gate_entry(soc: str, e: TableEntry) -> None:
    """Run an entry's tiling in the CPU twin (the kernel-launch build of the current kernel source)
    and check it against the float64 reference; GateFailure if it faults or is wrong."""
    check_tiling(soc, e.size, e.variant, e.tiling_params(), seed=StudyKey(soc, e.variant, e.size).seed())


@dataclass(frozen=True)
class GatePasses:
    """Tilings that passed the gate against the current kernel sources: a table's entries, where the table
    carries the current kernel hash (a table takes that hash only when every entry passed: the sweep writes
    none otherwise, and ``regate`` stamps it only then). The gate is a function of the kernel sources, the
    SoC, the variant, the size and the tiling (its inputs are seeded by the key), so an identical tiling need
    not run again: a re-sweep after a profile change gates only what moved. On the 1-core Ascend310B1 every
    1 Gi entry runs whole in the twin (about a minute each), and a profile change leaves those knobs as
    they were. The checker itself (``tuner/gate.py``, ``kernel/reference.py``) is not in the kernel hash, as
    for ``regate``: after changing it, sweep with ``--gate-all``."""

    soc: str
    tilings: frozenset[tuple[Variant, int, tuple[tuple[str, int], ...]]]

    @staticmethod
    def _tiling(e: TableEntry) -> tuple[Variant, int, tuple[tuple[str, int], ...]]:
        """What the gate's outcome depends on besides the kernel and the SoC."""
        return e.variant, e.size, tuple(sorted(e.params.items()))

    @classmethod
    def of(cls, table: TuningTable | None) -> GatePasses | None:
        """The passes a table certifies, or None where it certifies none (no table, another kernel)."""
        if table is None or table.kernel_hash != kernel_source_hash():
            return None
        return cls(table.soc, frozenset(cls._tiling(e) for e in table.entries))

    def covers(self, soc: str, e: TableEntry) -> bool:
        return soc == self.soc and self._tiling(e) in self.tilings


def regate(table: TuningTable, progress: bool = True) -> TuningTable:
    """The table re-checked against the current kernel sources: every entry runs through the gate
    again (the knobs are not re-tuned), and only if all pass does the table take the current kernel
    hash. For kernel changes that leave the cost model alone (the model, not the kernel source,
    chose the knobs); a changed model needs a new sweep."""
    failures = []
    for e in tqdm(table.entries, desc=f"regate {table.soc}", unit="entry", disable=not progress):
        try:
            gate_entry(table.soc, e)
        except GateFailure as err:
            failures.append(str(err))
    if failures:
        raise GateFailure(
            f"{len(failures)} of {len(table.entries)} entries failed the CPU-twin gate; the table is unchanged. "
            f"First: {failures[0]}"
        )
    return replace(table, kernel_hash=kernel_source_hash())


def merge(base: TuningTable, newer: TuningTable) -> TuningTable:
    """``base`` with ``newer``'s entries in place of its own for the same (variant, size) and added where
    it has none: for re-sweeping part of a table (e.g. the variants a cost-model change touched). Both
    must be of one SoC, backend and SoC profile; the merged table takes ``newer``'s creation time, and its
    kernel hash only where the base has the same: a table's kernel hash says every entry passed the gate
    against those sources (``GatePasses`` and the service trust it), so entries gated against other sources
    keep the base's hash, stale until ``regate`` checks every entry against the current kernel sources."""
    for what in ("soc", "backend", "soc_profile_hash"):
        if getattr(base, what) != getattr(newer, what):
            raise TableError(f"cannot merge: {what} {getattr(newer, what)!r} is not the base's {getattr(base, what)!r}")
    replaced = {(e.variant, e.size): e for e in newer.entries}
    kept = tuple(e for e in base.entries if (e.variant, e.size) not in replaced)
    return replace(
        base,
        entries=kept + newer.entries,
        kernel_hash=newer.kernel_hash if base.kernel_hash == newer.kernel_hash else base.kernel_hash,
        created=newer.created,
        trials_per_study=max(base.trials_per_study, newer.trials_per_study),
    )


def rebaseline(table: TuningTable) -> TuningTable:
    """The table with every ``seed_default_us`` re-timed as the seed default is defined now
    (``seed_default_tiling``), the knobs and tuned times untouched. Model-backend tables only: the
    model times it here; a table timed on a device needs that device (re-sweep there)."""
    if table.backend != "model":
        raise TableError(
            f"{table.soc}: a {table.backend!r}-backend table's baseline can only be re-timed on that backend"
        )
    soc = load_soc(table.soc)
    backend = ModelBackend()
    protocol = MeasurementProtocol()

    def timed(e: TableEntry) -> float:
        tiling = seed_default_tiling(StudyKey(table.soc, e.variant, e.size), soc)
        return round(measure(backend, tiling, protocol).median_us, 4)

    entries = tuple(replace(e, seed_default_us=timed(e)) for e in table.entries)
    return replace(table, entries=entries)


class SweepSettingsMismatch(ValueError):
    """The storage holds studies of these keys made with other settings: resuming them would mix the two."""


def sweep_settings(trials: int, backend: str, **knobs: object) -> dict[str, object]:
    """What a study's entry depends on besides its key: the trial count, the backend and its noise, seed
    and device, the measurement protocol, the strategy, and the kernel sources (their hash)."""
    return {"trials": trials, "backend": backend, **knobs, "kernel_hash": kernel_source_hash()}


# Settings a sweep stores only where they are not their default (so studies of sweeps from before the setting
# existed resume): absent on either side, a setting is its default here.
OPTIONAL_SETTINGS: dict[str, object] = {"explore": 0, "stop_early": False, "second_look": SECOND_LOOK}


def check_resumable(
    store: optuna.storages.BaseStorage, keys: list[StudyKey], backend: str, settings: dict[str, object], where: str
) -> tuple[int, int]:
    """(studies finished, studies begun) among ``keys`` in the storage, or SweepSettingsMismatch naming
    the first setting a stored study was made with that this sweep does not share (a study from before
    settings were stored is taken as this sweep's; an optional setting absent on either side is its default)."""
    names = {k.study_name(backend) for k in keys}
    finished = begun = 0
    for frozen in store.get_all_studies():
        if frozen.study_name not in names:
            continue
        stored = frozen.user_attrs.get("sweep")
        if isinstance(stored, dict):
            compared = [*settings, *(k for k in OPTIONAL_SETTINGS if k not in settings)]
            ours = {k: settings.get(k, OPTIONAL_SETTINGS.get(k)) for k in compared}
            theirs = {k: stored.get(k, OPTIONAL_SETTINGS.get(k)) for k in compared}
            differ = [f"{k}={theirs[k]!r} (this run: {ours[k]!r})" for k in compared if theirs[k] != ours[k]]
            if differ:
                raise SweepSettingsMismatch(
                    f"{where} holds study {frozen.study_name} made with {', '.join(differ)}: run with its "
                    "settings to resume it, or give another --storage (or remove that file) to start fresh"
                )
        done = store.get_all_trials(frozen._study_id, deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        wanted = settings.get("trials")
        finished += isinstance(wanted, int) and len(done) >= wanted or "entry" in frozen.user_attrs
        begun += 1
    return finished, begun - finished


@dataclass
class SweepRun:
    """What a sweep did: its entries, and how many of its studies it found finished or begun in the storage."""

    entries: int = 0
    reused: int = 0
    resumed: int = 0
    gates_run: int = 0
    gates_known: int = 0  # tilings the table at --out had passed against the same kernel (GatePasses)

    def text(self) -> str:
        new = max(self.entries - self.reused - self.resumed, 0)
        return (
            f"{self.reused} finished studies reused from the storage, {self.resumed} resumed, {new} run new; "
            f"{self.gates_run} tilings gated in the CPU twin, {self.gates_known} passed it before (same kernel)"
        )


def races(strategy: str, deterministic: bool, learn: bool) -> tuple[bool, str]:
    """Whether a sweep races its keys (a race runs on the learnt device model: ``strategy`` race, or auto on a
    timed backend), and why not where it does not (the rest search by TPE, or take the exact pick)."""
    if not learn:
        return False, ("the backend is deterministic: one sample is the whole truth and there is no device to learn"
                       if deterministic else "--no-learn: no device model to race on")  # fmt: skip
    if strategy == "tpe":
        return False, "--strategy tpe"
    if strategy == "auto" and deterministic:
        return False, "the backend is deterministic: one sample is the whole truth"
    return True, ""


def run_sweep(
    keys: list[StudyKey],
    backend: Backend,
    storage: optuna.storages.BaseStorage | str,
    trials: int,
    out: Path | None,
    progress: bool = True,
    protocol: MeasurementProtocol | None = None,
    patience: int = 0,
    records: RecordLog | None = None,
    learn: bool | None = None,
    strategy: str = "auto",
    plan: RacePlan | None = None,
    settings: dict[str, object] | None = None,
    storage_text: str = "the storage",
    outcome: SweepRun | None = None,
    explore: int = 0,
    gated: GatePasses | None = None,
) -> TuningTable:
    """Tune every key and write the table. On a timed backend (``learn``, the default there) the sweep
    learns the device as it goes: after every key the device model is refitted on every measurement in
    the storage (every worker's), the next key is searched on it (the race, ``tuner.race``), and the table
    carries the profile fitted on the whole sweep (its held-out errors give the answers' intervals).
    ``explore``: then that many sizes between the keys that teach the device model most (``tuner.explore``),
    tuned the same way and shipped as entries too (the caller shares the budget: ``shared_trials``).
    ``gated``: tilings known to pass the gate against the current kernel (``GatePasses``): not run again."""
    if not keys:
        raise ValueError("nothing to tune: no supported (dtype, reduction) combination selected")
    if explore < 0:
        raise ValueError(f"explore must be >= 0, got {explore}")
    socs = {k.soc for k in keys}
    if len(socs) != 1:
        raise ValueError(f"one SoC per sweep, got {sorted(socs)}")
    soc = load_soc(keys[0].soc)
    protocol = protocol or MeasurementProtocol()
    learn = (not backend.deterministic) if learn is None else learn
    if explore and not learn:
        raise ValueError("explore needs the device loop (a timed backend that learns): nothing here learns what a "
                         "size teaches")  # fmt: skip
    store = optuna.storages.get_storage(storage) if isinstance(storage, str) else storage
    reused = resumed = 0
    if settings is not None:  # never resume studies made otherwise (a silent mix of two sweeps)
        reused, resumed = check_resumable(store, keys, backend.name, settings, storage_text)
    learner = Learner(soc, store, backend.name) if learn else None
    clock = DeviceClock(backend)
    if not backend.deterministic:
        planned = estimate(keys, trials, protocol, plan)
        more = f", and {explore} sizes between them (each about as much as a key)" if explore else ""
        tqdm.write(f"sweep {soc.name} on {backend.name}: {planned.text()} (at most){more}", file=sys.stderr)
    done: dict[StudyKey, TableEntry] = {}
    failures: list[str] = []
    gates = SweepRun() if outcome is None else outcome

    racing, _ = races(strategy, backend.deterministic, learner is not None)

    def run(key: StudyKey) -> None:
        model = learner.model() if learner else None
        kept = look_due(model, plan) if racing else 0  # spent by look_again once every key is done
        entry = tune(key, clock, store, max(trials - kept, 1), protocol, patience, records, model, strategy, plan,
                     settings)  # fmt: skip
        if learner:
            learner.study_done()
        ship(key, entry)

    def ship(key: StudyKey, entry: TableEntry) -> None:
        if gated is not None and gated.covers(key.soc, entry):
            gates.gates_known += 1
        else:
            gates.gates_run += 1
            try:  # no entry ships before the real kernel source ran it correctly in the CPU twin
                gate_entry(key.soc, entry)
            except GateFailure as e:
                failures.append(str(e))
                return
        done[key] = entry

    busy: list[StudyKey] = []
    bar = tqdm(keys, desc=f"sweep {soc.name}", unit="study", disable=not progress)
    for key in bar:
        bar.set_postfix_str(key.label())
        try:
            run(key)
        except KeyBusy:  # another worker races it: take the next key, collect this one's entry at the end
            busy.append(key)
    for key in busy:  # the other workers' keys: their entries, or the key itself where a worker went away
        wait_for_entry(key, backend.name, store)
        run(key)
    # the keys raced before the model settled, again on the whole sweep's model (measured better than looking
    # as soon as it settles: benchmarks/second_look.py)
    for key in [k for k in keys if k in done] if racing else []:
        assert learner is not None  # (racing: it learns)
        entry = look_again(key, clock, store, trials, learner.model(), protocol, records, plan)
        if entry is not None and entry != done[key]:
            learner.study_done()
            if entry.params == done[key].params:
                done[key] = entry  # the same tiling, gated: its times as the look measured them
            else:
                done.pop(key)
                ship(key, entry)
    extra: list[StudyKey] = []
    if explore and learner:  # chosen on every worker's measurements so far (workers may choose apart)
        chosen = choose(keys, learner.cases(), learner.model().profile, explore, trials)
        extra = [c.key for c in chosen if c.key not in done]
        for key in tqdm(extra, desc=f"explore {soc.name}", unit="study", disable=not progress):
            try:
                run(key)
            except KeyBusy:
                wait_for_entry(key, backend.name, store)
                run(key)
    entries = [done[k] for k in [*keys, *extra] if k in done]
    if failures:
        raise GateFailure(
            f"{len(failures)} of {len(keys) + len(extra)} entries failed the CPU-twin gate; no table written "
            f"(the studies are kept: rerun to resume). First: {failures[0]}"
        )
    device = None
    profile_hash = soc.profile_hash
    if learner:
        device = device_profile_document(learner.fit_device(folds=FOLDS))
        if device is not None:
            profile_hash = profile_from_json(device["profile"]).profile_hash
    if not backend.deterministic:
        tqdm.write(f"sweep {soc.name} spent {clock.text(soc)}", file=sys.stderr)
    table = TuningTable(
        soc=soc.name,
        soc_profile_hash=profile_hash,
        kernel_hash=kernel_source_hash(),
        backend=backend.name,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        trials_per_study=trials,
        entries=tuple(entries),
        calibration=calibration_summary(soc),
        versions=software_versions(backend.name),
        device=device,
    )
    if out is not None:
        write_table(table, out)
    if outcome is not None:
        outcome.entries, outcome.reused, outcome.resumed = len(table.entries), reused, resumed
    return table

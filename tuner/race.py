"""The search of one key on a timed backend: device time spent where it decides something.

1. **Candidates from the device model.** The whole space is scored with the model the sweep has learnt
   so far (``tuner.learning``); the configurations predicted within the model's own error of its best
   (``band_for(sigma)``) are where the device's best can be. The first batch is timed from the top of
   that band, spread over the knobs (a plateau of equal predictions is one candidate, not three), the
   seed default always among them; K adapts to the band (a fitted model's is narrow).
2. **Learning within the key.** What the key's own measurements say against the model (a ridge fit of
   their log residuals by block size, BUFFER_NUM, tile alignment and core count, pulled towards the
   sweep's model) re-ranks the configurations not timed yet, and the next batch is the best of those
   (with an occasional TPE proposal, to look where the model does not), until the budget is spent. With
   ``stop_early`` a key stops sooner, once nothing left is predicted to beat the leader by more than the
   model's error: fewer samples, worse picks (measured below).
3. **A race under noise** among the fastest measured: successive halving, survivors sampled again,
   interleaved so drift hits all alike, until one leads the rest by more than the noise (standard errors
   of the medians) or every survivor has its cap of samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import optuna

from tiling_model import TilingData, TilingParams, compute_tiling
from tiling_model.correction import align_class, align_classes, block_classes
from tiling_model.space import ScoredSpace, score_space
from tuner.backends import Backend
from tuner.learning import DeviceModel
from tuner.trial_space import TrialSpace

#: Trials a key raced before the device model settled keeps for its second look (RacePlan.second_look; the
#: sweep's --second-look default, 0: none).
SECOND_LOOK = 6


@dataclass(frozen=True)
class RacePlan:
    """How a key's search spends its trials and samples (the protocol's warm-up and flush rules apply)."""

    first_samples: int = 5  # each configuration's first measurement
    round_samples: int = 3  # added to each survivor per round of the race
    max_samples: int = 30  # per candidate, over all rounds
    z: float = 2.0  # standard errors apart for a leader
    band_z: float = 2.0  # the model's band: its best times exp(band_z * sigma)
    # Stop a key before its budget once settled (off by default): on eight stand-in devices (30-key sweeps at
    # 20 trials, 2-3 replicates each) the stop saved 24% of the samples (about 20 ms of device time a key at
    # tuner.device_time's costs) and cost 3 points of keys within 2% of the optimum (5.6 within 1%), worse on
    # 7 of 8 devices (benchmarks/early_stop.py). Settled: nothing untimed is predicted below leader *
    # exp(stop_z * sigma), or fewer than stop_expected untimed configurations are expected to beat the leader
    # by stop_gain (each by the key model's normal error; 0.05 -> 0.02 chosen on bench-search's device: 89% ->
    # 93% within 2%).
    stop_early: bool = False
    stop_z: float = 4.0
    stop_gain: float = 0.005
    stop_expected: float = 0.02
    first_batch: float = 0.35  # of the budget, the first batch (at least min_candidates)
    min_candidates: int = 4
    batch: int = 3  # configurations per later batch
    explore_every: int = 3  # every so many batches, one configuration from TPE
    contenders: int = 4  # the final race's field
    local_ridge: float = 1.0  # pulls the key's own knob effects towards the sweep's model
    # A second look (tuner.study.look_again): a key raced on a device model fitted on fewer than settled_keys
    # keys keeps second_look of its trials until every key is done, then spends them on the whole sweep's model
    # (0: none). benchmarks/second_look.py, eight stand-in devices, 30-key sweeps, 2 replicates: keys within 2%
    # of the optimum 86.9 -> 91.5% at 20 trials (the first 6 keys 57 -> 85%), 77.7 -> 81.2% at 12; samples +6%.
    # Both values were chosen on those devices (where the first keys' misses were found): in-sample.
    second_look: int = SECOND_LOOK
    settled_keys: int = 6


@dataclass
class Entrant:
    params: TilingParams
    tiling: TilingData
    samples: list[float] = field(default_factory=list)

    @property
    def key(self) -> tuple[int, ...]:
        p = self.tiling.params
        return (int(p.block_bytes or 0), int(p.buffer_num or 0), int(p.tile_bytes or 0), int(p.core_num or 0))

    def median(self) -> float:
        return float(np.median(self._kept()))

    def standard_error(self) -> float:
        """Of the median: 1.2533 x the robust sd over sqrt(n) (a single sample: unbounded)."""
        kept = self._kept()
        if kept.size < 2:
            return math.inf
        med = float(np.median(kept))
        sd = 1.4826 * float(np.median(np.abs(kept - med)))
        sd = max(sd, 0.004 * med)  # never trust a spread below 0.4%: three samples can agree by chance
        return 1.2533 * sd / math.sqrt(kept.size)

    def _kept(self) -> np.ndarray:
        """The samples within 5 MADs of their median (outliers from a disturbed launch left out)."""
        x = np.asarray(self.samples, dtype=float)
        med = float(np.median(x))
        mad = float(np.median(np.abs(x - med)))
        return x if mad == 0 else x[np.abs(x - med) <= 5 * 1.4826 * mad]


def _signature(block: int, bn: int, tile: int, cores: int, n_cores: int) -> tuple[int, int, int, int]:
    """What makes two configurations teach different things: block, buffers, tile alignment, core band."""
    return (block, bn, align_class(tile), min(3, 4 * cores // max(n_cores + 1, 1)))


class KeyModel:
    """The sweep's model of the device for one key, corrected by the key's own measurements."""

    def __init__(self, space: TrialSpace, model: DeviceModel, n: int, plan: RacePlan) -> None:
        self.space, self.plan, self.sigma = space, plan, model.sigma
        self.scored: ScoredSpace = score_space(space.kernel, model.profile, n)
        self.base = np.log(self.scored.result.predicted_us)
        s = self.scored
        cores = space.soc.aiv_cores
        self.classes = [
            block_classes(s.block_bytes),
            s.buffer_num.astype(np.int64),
            align_classes(s.tile_bytes),
            s.core_num.astype(np.int64),
        ]
        self.offsets = [0, 16, 21, 25]
        self.width = 25 + cores + 1
        self.log_pred = self.base.copy()
        cols = (s.block_bytes, s.buffer_num, s.tile_bytes, s.core_num)
        knobs = zip(*(c.tolist() for c in cols), strict=True)
        self.index: dict[tuple[int, ...], int] = {k: i for i, k in enumerate(knobs)}

    def row(self, i: int) -> np.ndarray:
        x = np.zeros(self.width)
        for cls, off in zip(self.classes, self.offsets, strict=True):
            x[off + int(cls[i])] = 1.0
        return x

    def learn(self, measured: list[Entrant]) -> None:
        """Re-rank every configuration by the key's log residuals (ridge by knob class, towards 0)."""
        rows = [(self.index[e.key], math.log(e.median())) for e in measured if e.key in self.index]
        if len(rows) < 2:
            return
        x = np.array([self.row(i) for i, _ in rows])
        y = np.array([v - self.base[i] for i, v in rows])
        level = float(np.median(y))  # the key's overall level against the model: shifts every prediction
        beta = np.linalg.solve(x.T @ x + self.plan.local_ridge * np.eye(self.width), x.T @ (y - level))
        effect = sum(beta[off + cls] for cls, off in zip(self.classes, self.offsets, strict=True))
        self.log_pred = self.base + level + np.asarray(effect)

    def best_untimed(self, timed: set[tuple[int, ...]], count: int) -> list[int]:
        """The ``count`` fastest predicted configurations not timed yet, spread over knob signatures."""
        order = np.argsort(self.log_pred, kind="stable")
        s, cores = self.scored, self.space.soc.aiv_cores
        picked: list[int] = []
        seen: set[tuple[int, int, int, int]] = set()
        limit = float(self.log_pred[order[0]]) + self.plan.band_z * self.sigma
        for i in order:
            i = int(i)
            k = (int(s.block_bytes[i]), int(s.buffer_num[i]), int(s.tile_bytes[i]), int(s.core_num[i]))
            if k in timed:
                continue
            sig = _signature(*k, cores)
            if sig in seen and self.log_pred[i] <= limit:
                continue
            picked.append(i)
            seen.add(sig)
            if len(picked) >= count:
                break
        return picked

    def expected_better(self, timed: set[tuple[int, ...]], log_us: float) -> float:
        """How many configurations not timed yet are expected below ``log_us`` (each normal around its
        prediction with the model's sd)."""
        z = (log_us - self.log_pred) / max(self.sigma, 1e-6)
        p = 0.5 * np.vectorize(math.erfc)(-z / math.sqrt(2.0))
        for k in timed:
            i = self.index.get(k)
            if i is not None:
                p[i] = 0.0
        return float(p.sum())

    def in_band(self) -> int:
        return int((self.log_pred <= self.log_pred.min() + self.plan.band_z * self.sigma).sum())


Prior = Callable[[Entrant], tuple[float, float]]


def _no_prior(_e: Entrant) -> tuple[float, float]:
    return 0.0, math.inf


def _posterior(e: Entrant, prior: Prior) -> tuple[float, float]:
    """The entrant's log time, its measurements combined with the model's prediction (mean, variance):
    a median of a few noisy samples is pulled towards what the model expects of it (the fastest of many
    noisy medians is otherwise the luckiest, not the best)."""
    y = math.log(e.median())
    v = (e.standard_error() / e.median()) ** 2
    mu0, v0 = prior(e)
    if not math.isfinite(v0) or v0 <= 0:
        return y, v
    if not math.isfinite(v):
        return mu0, v0
    w = (1 / v0) + (1 / v)
    return (mu0 / v0 + y / v) / w, 1 / w


def race(
    backend: Backend,
    entrants: list[Entrant],
    plan: RacePlan,
    warmup: int,
    flush: Callable[[Entrant], bool],
    prior: Prior = _no_prior,
) -> Entrant:
    """Sample the entrants still within ``plan.z`` posterior sds of the leader, ``round_samples`` each per
    round, interleaved, until one leads the rest (or every one left has its ``max_samples``); the winner
    is the fastest by the posterior (``_posterior``)."""

    def post(e: Entrant) -> tuple[float, float]:
        return _posterior(e, prior)

    alive = list(entrants)
    while len(alive) > 1:
        alive.sort(key=lambda e: post(e)[0])
        lead_mu, lead_v = post(alive[0])
        alive = [alive[0]] + [e for e in alive[1:] if post(e)[0] - lead_mu <= plan.z * math.sqrt(post(e)[1] + lead_v)]
        if len(alive) == 1 or all(len(e.samples) >= plan.max_samples for e in alive):
            break
        for e in alive:
            for _ in range(warmup):
                backend.sample(e.tiling)
        for _ in range(plan.round_samples):
            for e in alive:
                if len(e.samples) < plan.max_samples:
                    if flush(e):
                        backend.flush_l2()
                    e.samples.append(backend.sample(e.tiling))
    return min(alive, key=lambda e: post(e)[0])


Measure = Callable[[TilingParams], Entrant | None]


def search(
    space: TrialSpace,
    n: int,
    model: DeviceModel,
    budget: int,
    measure_new: Measure,
    backend: Backend,
    sampler_seed: int,
    plan: RacePlan | None = None,
    warmup: int = 1,
    flush: Callable[[Entrant], bool] = lambda _e: True,
    before: Sequence[Entrant] = (),
) -> tuple[Entrant, list[Entrant], int]:
    """The key's winner, every configuration measured, and how many the model's band held.
    ``measure_new(params)`` times a configuration not measured yet (recording it), or returns None for one
    that failed. ``before``: the key's configurations measured earlier (a second look): they count against
    the budget, keep their samples, and the model's candidates are the best of the rest."""
    plan = plan or RacePlan()
    km = KeyModel(space, model, n, plan)
    band = km.in_band()
    measured: dict[tuple[int, ...], Entrant] = {e.key: e for e in before}
    tried: set[tuple[int, ...]] = set(measured)

    def add(params: TilingParams) -> None:
        e = measure_new(params)
        if e is not None:
            measured[e.key] = e
            tried.add(e.key)

    def knobs(i: int) -> TilingParams:
        return km.scored.params(i)

    first = max(plan.min_candidates, min(band, math.ceil(plan.first_batch * budget)))
    add(space.default_params())
    count = min(first, budget) - len(measured)
    for i in km.best_untimed(tried | set(measured), count) if count > 0 else []:
        add(knobs(i))
    tpe: optuna.Study | None = None
    batches = 0
    while len(measured) < budget and measured:
        km.learn(list(measured.values()))
        leader = min(measured.values(), key=lambda e: e.median())
        nxt = km.best_untimed(tried, min(plan.batch, budget - len(measured)))
        if not nxt:
            break
        if plan.stop_early and _settled(km, tried, leader, nxt[0], plan):
            break
        batches += 1
        if plan.explore_every and batches % plan.explore_every == 0:  # one proposal from TPE
            tpe = tpe or _tpe(space, list(measured.values()), sampler_seed)
            trial = tpe.ask(space.distributions())
            p = space.params_of(trial.params)
            add(p)
            got = measured.get(entrant_of(space, n, p, []).key)
            tpe.tell(trial, got.median() if got else math.inf)
            nxt = nxt[:-1]
        for i in nxt:
            add(knobs(i))
            tried.add(tuple(int(x) for x in (km.scored.block_bytes[i], km.scored.buffer_num[i],
                                               km.scored.tile_bytes[i], km.scored.core_num[i])))  # fmt: skip
    if not measured:
        raise optuna.exceptions.OptunaError("no configuration could be measured")
    km.learn(list(measured.values()))

    def prior(e: Entrant) -> tuple[float, float]:
        i = km.index.get(e.key)
        return (float(km.log_pred[i]), km.sigma**2) if i is not None else (0.0, math.inf)

    field_ = sorted(measured.values(), key=lambda e: _posterior(e, prior)[0])[: plan.contenders]
    return race(backend, field_, plan, warmup, flush, prior), list(measured.values()), band


def _settled(km: KeyModel, tried: set[tuple[int, ...]], leader: Entrant, nxt: int, plan: RacePlan) -> bool:
    """Whether a key may stop before its budget (``RacePlan.stop_early``): nothing untimed is predicted within
    the model's error of the leader, or the untimed configurations together are not expected to beat it."""
    if float(km.log_pred[nxt]) > math.log(leader.median()) + plan.stop_z * km.sigma:
        return True
    return km.expected_better(tried, math.log(leader.median()) - plan.stop_gain) < plan.stop_expected


def _tpe(space: TrialSpace, measured: list[Entrant], seed: int) -> optuna.Study:
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=0))
    dists = space.distributions()
    for e in measured:
        study.add_trial(
            optuna.trial.create_trial(params=space.point_of(e.params), distributions=dists, value=e.median())
        )
    return study


def entrant_of(space: TrialSpace, n: int, params: TilingParams, samples: list[float]) -> Entrant:
    t = compute_tiling([n], space.variant, params, space.soc)
    real = TilingParams(t.params.block_bytes, t.params.buffer_num, t.params.tile_bytes, t.params.core_num)
    return Entrant(real, t, list(samples))

"""``python -m tuner sweep ...``: tune tilings and write the table that ships with builds."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import optuna

from kernel.cpu import KernelBuildError
from kernel.npu import NpuUnavailable
from model_tools.cli.args import Parser, csv_of, positive_int
from tiling_model import DTYPES, REDUCTIONS, SocProfile, TableError, compute_tiling, known_socs, predict
from tiling_model.residual import summary_line
from tiling_model.tables import TableEntry, TuningTable, load_table, variant_order, write_table
from tuner.backends import BACKENDS, make_backend
from tuner.explore import shared_trials
from tuner.export_header import HEADER_PATH, export_header
from tuner.gate import GateFailure
from tuner.key import StudyKey
from tuner.protocol import MeasurementProtocol
from tuner.race import SECOND_LOOK, RacePlan
from tuner.records import RecordLog
from tuner.report import write_report
from tuner.storage import DEFAULT_STORAGE, open_storage
from tuner.study import EXACT_TRIALS, MODEL_SEEDS, requirement_tiling
from tuner.sweep import (
    DEFAULT_SIZES,
    DEFAULT_TRIALS,
    TABLES_DIR,
    GatePasses,
    SweepRun,
    merge,
    races,
    rebaseline,
    regate,
    run_sweep,
    sweep_keys,
    sweep_settings,
)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive element counts, got {text!r}")
    return sizes


def _weights(text: str) -> list[str]:
    """The weight forms to tune: full and none (true / false say the same); the broadcast forms are
    re-fitted from the full form's buckets (tiling_model.variant.TUNED_WEIGHT_FORMS)."""
    alias = {"true": "full", "false": "none"}
    return [alias.get(x, x) for x in csv_of(("full", "none", "true", "false"))(text)]


def _non_negative(text: str) -> int:
    return 0 if text.strip() == "0" else positive_int(text)


def _existing_table(path: Path) -> TuningTable | None:
    """The table a sweep will replace, if one is there and loads (its gate passes may be reused)."""
    try:
        return load_table(path) if path.is_file() else None
    except TableError:
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m tuner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    s = sub.add_parser("sweep", help="tune every (dtype, reduction, weight, size) key of one SoC")
    s.add_argument("--soc", required=True, choices=known_socs())
    s.add_argument("--dtypes", type=csv_of(DTYPES), default=list(DTYPES))
    s.add_argument("--reductions", type=csv_of(REDUCTIONS), default=list(REDUCTIONS))
    s.add_argument(
        "--weights", type=_weights, default=["full", "none"], help="full,none (true,false): the weight forms tuned"
    )
    s.add_argument(
        "--pos-weights", type=csv_of(("none", "full", "last_dim")), default=["none"], help="none,full,last_dim"
    )
    s.add_argument("--wrts", type=csv_of(("logit", "probability")), default=["logit"], help="logit,probability")
    s.add_argument(
        "--modes", type=csv_of(("grad", "fused")), default=["grad"],
        help="kernel modes: grad (BinaryCrossEntropyGrad), fused (BCEWithLogits' loss and gradient); grad,fused",
    )  # fmt: skip
    s.add_argument("--sizes", type=_sizes, default=list(DEFAULT_SIZES), help="element counts to tune at")
    s.add_argument(
        "--trials", type=positive_int, default=None,
        help=f"completed trials per study (default {DEFAULT_TRIALS}; --strategy exact has none to set)",
    )  # fmt: skip
    s.add_argument(
        "--explore", type=_non_negative, default=0, metavar="K",
        help="timed backends: also tune K sizes between the keys that teach the device model most (they ship as "
        "entries too); every study then runs trials x keys / (keys + K) trials: the same device budget",
    )  # fmt: skip
    s.add_argument(
        "--backend",
        default="model",
        choices=BACKENDS,
        help="what times a tiling: model (the cost model, the shipped tables), npu (a device), cpu (the CPU "
        "twin's clock), synthetic (a stand-in device, to try the device loop without one)",
    )
    s.add_argument("--device", type=int, help="npu backend: the NPU this worker uses (one worker per device)")
    s.add_argument(
        "--strategy",
        default="auto",
        choices=("auto", "race", "tpe", "exact"),
        help="per key: race (the learnt device model's candidates raced under noise), tpe (model-seeded TPE) or "
        "exact (a deterministic backend: the default and the model's 3 best measured once, the fastest or the most "
        "robust of those tied: what TPE's trials confirm there; the shipped tables). auto: race on a timed "
        "backend, exact on a deterministic one, tpe there if --trials, --patience, --confirm-top or --explore is given",
    )
    s.add_argument(
        "--no-learn",
        action="store_true",
        help="timed backends: learn no device model as the sweep goes (so nothing to race on: keys search by TPE)",
    )
    s.add_argument("--noise", type=float, default=0.0, help="model/synthetic backend: lognormal noise (e.g. 0.05)")
    s.add_argument("--outlier-rate", type=float, default=0.0, help="model/synthetic backend: share of slow samples")
    s.add_argument("--seed", type=int, default=0, help="seed of the synthetic noise (synthetic: the device's too)")
    s.add_argument(
        "--device-shape",
        choices=("knob", "realised", "crossed"),
        default="knob",
        help="synthetic backend: what the stand-in's shared effects follow: the knobs, the realised tiling, or the "
        "realised tiling in classes the residual's features keep apart",
    )
    s.add_argument("--warmup", type=int, default=2, help="timed backends: warm-up launches per measurement")
    s.add_argument(
        "--repeats", type=int, default=7,
        help="timed backends: samples per measurement (>= 3) of a TPE trial and of the seed default where no trial "
        "measured it; the race samples each configuration 5 times, its contenders 3 more a round to 30",
    )  # fmt: skip
    s.add_argument(
        "--confirm-top", type=int, default=None,
        help="--strategy tpe on a timed backend: the fastest trials measured again before a winner is named "
        "(default 3; the race measures its contenders again itself and refuses it)",
    )  # fmt: skip
    s.add_argument("--patience", type=int, default=0, help="stop a study when its best has not improved for M trials")
    s.add_argument(
        "--stop-early", action="store_true",
        help="race (timed backends): stop a key before its --trials once nothing untimed is expected to beat its "
        "leader (about a quarter fewer samples, somewhat worse picks: docs/manual.md, Tune)",
    )  # fmt: skip
    s.add_argument(
        "--second-look", type=_non_negative, default=SECOND_LOOK, metavar="K",
        help="race (timed backends): a key raced before the device model settled keeps K of its --trials for a "
        "second race on the whole sweep's model (default %(default)s; 0: none; docs/manual.md, Tune)",
    )  # fmt: skip
    s.add_argument("--records", type=Path, help="append every measurement as a JSON line (for calibrate --data)")
    s.add_argument("--storage", default=DEFAULT_STORAGE, help="Optuna RDB URL (SQLite file by default)")
    s.add_argument(
        "--out", type=Path, help="table path (default: ./tables/<SOC>.json; `make sweep` writes the shipped ones)"
    )
    s.add_argument(
        "--gate-all", action="store_true",
        help="gate every entry in the CPU twin, also tilings the table at --out passed against the same kernel "
        "(by default those are not run again: the table's kernel hash certifies them)",
    )  # fmt: skip
    s.add_argument("--no-progress", action="store_true")
    r = sub.add_parser("report", help="tuned vs seed-default time of every entry of a table")
    r.add_argument("--soc", required=True, choices=known_socs())
    r.add_argument("--table", type=Path, help="table path (default: the shipped one)")
    r.add_argument("--dtypes", type=csv_of(DTYPES), default=list(DTYPES))
    r.add_argument("--reductions", type=csv_of(REDUCTIONS), default=list(REDUCTIONS))
    r.add_argument("--out-dir", type=Path, help="also write report-<SOC>.md and speedup-<SOC>.png here")
    r.add_argument("--regret", type=_non_negative, default=0, help="with --out-dir: held-out sizes for regret")
    g = sub.add_parser("regate", help="re-check a table's entries against the current kernel sources (no re-tuning)")
    g.add_argument("--soc", required=True, choices=known_socs())
    g.add_argument("--table", type=Path, help="table path (default: the shipped one; rewritten in place)")
    g.add_argument("--no-progress", action="store_true")
    b = sub.add_parser("rebaseline", help="re-time seed_default_us of a model-backend table (knobs untouched)")
    b.add_argument("--soc", required=True, choices=known_socs())
    b.add_argument("--table", type=Path, help="table path (default: the shipped one; rewritten in place)")
    m = sub.add_parser("merge", help="put a partial sweep's entries into a table (e.g. after a model change)")
    m.add_argument("--soc", required=True, choices=known_socs())
    m.add_argument("--table", type=Path, help="table path (default: the shipped one; rewritten in place)")
    m.add_argument("--from", dest="newer", type=Path, required=True, help="the partial sweep's table")
    sub.add_parser(
        "doctor", add_help=False, help="on an Ascend host: check CANN, torch_npu, the device, build, golden, timing"
    )
    p = sub.add_parser(
        "replay", help="re-run search strategies offline against a device run's records (no device needed)"
    )
    p.add_argument("--records", type=Path, action="append", required=True, help="a sweep's --records file (repeatable)")
    p.add_argument("--soc", choices=known_socs(), help="the records' SoC (default: the one they name)")
    p.add_argument("--strategies", type=csv_of(("race", "tpe")), default=["race", "tpe"])
    p.add_argument("--budgets", type=_sizes, default=[12, 20, 40], help="trials per key, comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    x = sub.add_parser("export-header", help="write the tables as a C++ header for the host tiling")
    x.add_argument("--tables", type=Path, default=TABLES_DIR, help="directory of <SoC>.json tables")
    x.add_argument("--out", type=Path, default=HEADER_PATH)
    return parser


def report(table_path: Path, dtypes: list[str], reductions: list[str]) -> None:
    """Print one row per entry: knobs, the measured (tuned) time beside the table's model's prediction of it,
    the seed default's and the speedup over it; and, for a device-tuned table, its fit."""
    table = load_table(table_path)
    print(
        f"{table_path}: {table.soc}, backend {table.backend}, {table.trials_per_study} trials/study, "
        f"created {table.created}"
    )
    soc = table.profile()  # the device's fitted profile where the table carries one
    if table.device:
        fit = table.device.get("fit", {})
        held = fit.get("held_out_median")
        held_text = f", held out by key {100 * held:.1f}%" if isinstance(held, int | float) else ""
        print(
            f"device fit: {fit.get('cases')} measurements of {fit.get('keys')} keys; median |error| "
            f"{100 * fit.get('median_before', 0):.1f}% with the shipped profile, {100 * fit.get('median', 0):.1f}% "
            f"fitted{held_text}; fitted {fit.get('fitted')}"
        )
        print(f"knob correction: {fit.get('knob_correction')}")
        if "residual" in fit:
            print(f"residual over the realised tiling: {summary_line(fit['residual'])}")
    print(
        f"{'dtype':<9}{'red':<5}{'w':<9}{'pos_w':<9}{'wrt':<6}"
        f"{'size':>11}  {'block':>6}{'bufs':>5}{'tile':>7}{'cores':>6}"
        f"{'tuned_us':>11}{'pred_us':>10}{'err':>7}{'seed_us':>11}{'speedup':>9}{'req_us':>10}"
    )
    shown = [e for e in table.entries if e.variant.dtype in dtypes and e.variant.reduction in reductions]
    errors = []
    for e in sorted(shown, key=lambda e: (variant_order(e.variant), e.size)):
        v = e.variant
        p = e.params
        predicted = predict(compute_tiling([e.size], v, e.tiling_params(), soc), soc)
        err = predicted / e.tuned_us - 1 if e.tuned_us else 0.0
        errors.append(abs(err))
        print(
            f"{v.dtype:<9}{v.reduction:<5}{v.weight:<9}{v.pos_weight:<9}{v.wrt[:5] if v.mode == 'grad' else 'fused':<6}"
            f"{e.size:>11}  {p['block_bytes']:>6}"
            f"{p['buffer_num']:>5}{p['tile_bytes']:>7}{p['core_num']:>6}{e.tuned_us:>11.3f}{predicted:>10.3f}"
            f"{100 * err:>+6.1f}%{e.seed_default_us:>11.3f}{e.seed_default_us / e.tuned_us:>9.3f}"
            f"{_requirement_us(table, e, soc):>10}"
        )
    ratios = [e.seed_default_us / e.tuned_us for e in shown]
    if not ratios:
        return
    print(
        f"speedup over the seed default: {len(ratios)} entries, min {min(ratios):.3f}x, "
        f"median {statistics.median(ratios):.3f}x, max {max(ratios):.3f}x; "
        f"the model's |error| on the tuned times: median {100 * statistics.median(errors):.1f}%"
    )


def _requirement_us(table: TuningTable, e: TableEntry, soc: SocProfile) -> str:
    """The model's time of the requirement's own code for this entry ("-" where it has none)."""
    t = requirement_tiling(StudyKey(table.soc, e.variant, e.size), soc)
    return "-" if t is None else f"{predict(t, soc):.3f}"


def _replay(args: argparse.Namespace) -> int:
    """Strategies and budgets against the records: replayed regret per key and samples."""
    import json

    from model_tools.calibrate import CalibrationError
    from tuner.replay import replay, replay_device

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        device = replay_device(args.records, args.soc)
    except CalibrationError as e:
        return _error(e)
    print(f"replaying {len(args.strategies)} strategies x {len(args.budgets)} budgets on {len(device.keys)} recorded "
          "keys (each a search against the records; tens of seconds)...", file=sys.stderr, flush=True)  # fmt: skip
    rows = replay(device, args.strategies, args.budgets, args.seed)
    if args.json:
        print(json.dumps({"soc": device.soc.name, "keys": len(device.keys), "rows": rows, "answered": device.answered}))
        return 0
    print(
        f"{device.soc.name}: {len(device.keys)} recorded keys; replayed regret of each key's pick over the best "
        "replayed time of its space (recorded medians, the fitted model elsewhere)"
    )
    print(f"  {'strategy':<8}{'trials':>7}{'median':>9}{'p90':>9}{'<=2%':>7}{'samples':>9}")
    for r in rows:
        reg = sorted(r["regret"])
        p90 = reg[min(len(reg) - 1, int(0.9 * len(reg)))]
        within = sum(x <= 0.02 for x in reg) / len(reg)
        print(f"  {r['strategy']:<8}{r['budget']:>7}{100 * statistics.median(reg):>8.2f}%{100 * p90:>8.2f}%"
              f"{100 * within:>6.0f}%{statistics.mean(r['samples']):>9.0f}")  # fmt: skip
    total = sum(device.answered.values()) or 1
    print(f"samples answered from the records: {100 * device.answered['recorded'] / total:.0f}% (the rest: the model)")
    return 0


def _error(e: Exception, code: int = 2) -> int:
    """One line on stderr naming what was wrong; the exit code (2: bad input, 1: a check failed)."""
    print(f"python -m tuner: error: {e}", file=sys.stderr)
    return code


def _table_of(soc: str, given: Path | None) -> tuple[Path, TuningTable]:
    """The table a command rewrites in place (the shipped one unless given), refused if it holds another SoC."""
    path = given or TABLES_DIR / f"{soc}.json"
    table = load_table(path)
    if table.soc != soc:
        raise TableError(f"{path}: holds SoC {table.soc!r}, not {soc!r}")
    return path, table


def _search_flags(args: argparse.Namespace) -> list[str]:
    """The flags given that set a search's trials (what --strategy exact has none of)."""
    return [flag for flag, value in (("--trials", args.trials), ("--patience", args.patience or None),
                                     ("--confirm-top", args.confirm_top), ("--explore", args.explore or None))
            if value is not None]  # fmt: skip


def _strategy(args: argparse.Namespace, deterministic: bool) -> str:
    """--strategy as run: auto is exact on a deterministic backend where no flag asks for a search (TPE's trials
    there confirm the exact pick: the same entries, at a third of the measurements), TPE where one does, the race
    on a timed backend (tuner.sweep.races)."""
    if args.strategy == "auto" and deterministic and not _search_flags(args):
        return "exact"
    return str(args.strategy)


def _check_exact(args: argparse.Namespace, deterministic: bool) -> None:
    """--strategy exact: a deterministic backend, and none of the flags that set a search's trials."""
    if not deterministic:
        raise ValueError(f"--strategy exact measures each configuration once, and the {args.backend} backend is "
                         "noisy (with --noise, or a real clock): one sample is not its truth")  # fmt: skip
    given = _search_flags(args)
    if given:
        raise ValueError(f"{', '.join(given)}: --strategy exact runs no search to set them (the default and the "
                         f"model's {MODEL_SEEDS} best, each measured once)")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["doctor"]:  # its own flags (tuner/doctor.py)
        from tuner.doctor import main as doctor

        return doctor(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "export-header":
        try:
            count = export_header(args.tables, args.out)
        except (TableError, ValueError) as e:
            return _error(e)
        print(f"wrote {args.out}: {count} entries")
        return 0
    if args.command == "replay":
        return _replay(args)
    if args.command == "report":
        try:
            path = args.table or TABLES_DIR / f"{args.soc}.json"
            report(path, args.dtypes, args.reductions)
            if args.out_dir:
                print(f"wrote {write_report(load_table(path), args.out_dir, args.regret)}")
        except TableError as e:
            return _error(e)
        return 0
    if args.command == "rebaseline":
        try:
            path, table = _table_of(args.soc, args.table)
            write_table(rebaseline(table), path)
        except TableError as e:
            return _error(e)
        print(f"rebaselined {path}: {len(table.entries)} entries")
        return 0
    if args.command == "merge":
        try:
            path, table = _table_of(args.soc, args.table)
            newer = load_table(args.newer)
            merged = merge(table, newer)
            write_table(merged, path)
        except TableError as e:
            return _error(e)
        stale = "" if merged.kernel_hash == newer.kernel_hash else (
            f"; the base was gated against kernel {table.kernel_hash}, not {newer.kernel_hash}: the table keeps that "
            f"hash until `python -m tuner regate --soc {args.soc} --table {path}` checks every entry"
        )  # fmt: skip
        print(f"merged {args.newer} into {path}: {len(newer.entries)} entries replaced or added{stale}")
        return 0
    if args.command == "regate":
        try:
            path, table = _table_of(args.soc, args.table)
            start = time.perf_counter()
            write_table(regate(table, not args.no_progress), path)
        except (TableError, KernelBuildError) as e:
            return _error(e)
        except GateFailure as e:
            return _error(e, 1)
        print(f"regated {path}: {len(table.entries)} entries pass, {time.perf_counter() - start:.1f} s")
        return 0
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = args.out or Path("tables") / f"{args.soc}.json"
    keys = sweep_keys(
        args.soc, args.dtypes, args.reductions, args.weights, args.sizes, args.pos_weights, args.wrts, args.modes
    )
    try:
        start = time.perf_counter()
        backend = make_backend(
            args.backend, args.noise, args.outlier_rate, args.seed, args.soc, args.device, args.device_shape
        )
        strategy = _strategy(args, backend.deterministic)
        racing, why = races(strategy, backend.deterministic, not args.no_learn and not backend.deterministic)
        search = "the model's exact pick" if strategy == "exact" else "TPE"
        if strategy == "exact":
            _check_exact(args, backend.deterministic)
        confirm_top = MeasurementProtocol.confirm_top if args.confirm_top is None else args.confirm_top
        protocol = MeasurementProtocol(warmup=args.warmup, repeats=args.repeats, confirm_top=confirm_top)
        records = RecordLog(args.records) if args.records else None
        if args.patience < 0:
            raise ValueError("patience must be >= 0")
        if args.stop_early and not racing:
            raise ValueError(f"--stop-early stops the race, and this sweep searches by {search} ({why})"
                             + ("; TPE stops with --patience" if search == "TPE" else ""))  # fmt: skip
        if args.second_look != SECOND_LOOK and not racing:
            raise ValueError(f"--second-look is the race's, and this sweep searches by {search} ({why})"
                             + ("; TPE has none" if search == "TPE" else ""))  # fmt: skip
        if args.confirm_top is not None and racing:
            raise ValueError(
                "--confirm-top is TPE's (its fastest trials measured again before a winner is named); the race "
                "measures its contenders again until one leads (--strategy tpe to use it)"
            )
        if strategy == "race" and not racing:
            raise ValueError(f"--strategy race races the learnt device model's candidates, and {why}")
        trials = EXACT_TRIALS if strategy == "exact" else shared_trials(args.trials or DEFAULT_TRIALS,
                                                                              len(keys), args.explore)  # fmt: skip
        explore = {"explore": args.explore} if args.explore else {}  # (studies of sweeps without it resume)
        settings = sweep_settings(
            trials, args.backend, noise=args.noise, outlier_rate=args.outlier_rate, seed=args.seed, **explore,
            device=args.device, warmup=args.warmup, repeats=args.repeats, confirm_top=confirm_top,
            strategy=strategy, patience=args.patience, learn=not args.no_learn,
            **({"stop_early": True} if args.stop_early else {}),  # (studies of sweeps without it resume)
            **({"second_look": args.second_look} if args.second_look != SECOND_LOOK else {}),
        )  # fmt: skip
        outcome = SweepRun()
        gated = None if args.gate_all else GatePasses.of(_existing_table(out))
        storage = open_storage(args.storage)  # (after every check: a refused run leaves no new file)
        table = run_sweep(
            keys, backend, storage, trials, out, not args.no_progress, protocol, args.patience, records,
            learn=False if args.no_learn else None, strategy=strategy, settings=settings,
            storage_text=f"--storage {args.storage}", outcome=outcome, explore=args.explore, gated=gated,
            plan=RacePlan(stop_early=args.stop_early, second_look=args.second_look),
        )  # fmt: skip
    except (ValueError, NpuUnavailable, KernelBuildError) as e:
        return _error(e)
    except GateFailure as e:
        return _error(e, 1)
    took = time.perf_counter() - start
    explored = f", {len(table.entries) - len(keys)} of them sizes between the keys (--explore)" if args.explore else ""
    each = f"{trials} trial{'s' if trials != 1 else ''} each"
    print(f"wrote {out}: {len(table.entries)} entries{explored}, {each} ({outcome.text()}), {took:.1f} s")
    return 0

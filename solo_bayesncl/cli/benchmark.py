"""``python -m solo_bayesncl.benchmark --preset cpu [--out DIR] [--protocol standard|paper]``.

Exit status: 0 done, 1 a run failed, 2 bad input (preset, override, command line, a run another
benchmark is training, an unreadable record or lock), 130 interrupted by Ctrl-C (143 by SIGTERM):
run the same command again to resume.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from solo_bayesncl.benchmark.presets import PresetError, available_presets, load_preset
from solo_bayesncl.cli.invocation import command_name, error_status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=command_name("solo-bayesncl-benchmark"),  # as the user ran it
        description="SimCLR, MoCo v2+, NCL and BayesNCL side by side at equal budget.",
    )
    parser.add_argument(
        "--preset", required=True, help=f"one of {', '.join(available_presets())} or a YAML file"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results folder (default: the preset's out_dir, relative to the preset file's "
        "folder, or to the current folder for a shipped preset; printed before the runs start)",
    )
    parser.add_argument(
        "--protocol",
        choices=("standard", "paper"),
        default="standard",
        help="paper: add the official BayesNCL evaluation's figures (consistency x100, "
        "training-mode BatchNorm, ...) beside the standard ones; see docs/fidelity.md",
    )
    parser.add_argument(
        "--seeds",
        type=_seed_list,
        default=None,
        help="comma-separated seeds of the preset to run now (default: all); the table covers "
        "every finished run of the preset (with --table-only or --keep-records-from too: the "
        "seeds are checked, and the table still covers every finished run)",
    )
    parser.add_argument(
        "--leave-busy",
        action="store_true",
        help="leave a run that another benchmark is training to it and go on with the next "
        "(several benchmarks then share the preset's runs: one per GPU, or one per CPU core with "
        "OMP_NUM_THREADS=1); without it such a run stops this benchmark",
    )
    parser.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        metavar="N",
        help="torch's CPU threads in every run, recorded with each (default: the count the "
        "finished runs of --out trained with, else OMP_NUM_THREADS, else the cores this process "
        "may use; lower it on a shared machine: the figures change with the count, not the load)",
    )
    no_training = parser.add_mutually_exclusive_group()
    no_training.add_argument(
        "--table-only",
        action="store_true",
        help="train nothing: write the table and plots from the finished runs only (the "
        "unfinished ones, and any whose records cannot be read, are listed under the table, "
        "never counted; an unreadable one ends the command with status 2)",
    )
    no_training.add_argument(
        "--keep-records-from",
        type=Path,
        metavar="DIR",
        default=None,
        help="train nothing: copy the records (result.json, pretrain_metrics.csv, "
        "gate_measures.json) of the preset's runs finished in the results folder DIR into --out, "
        "add their commits to its COMMIT file, then write the table as --table-only does; a run "
        "trained from uncommitted changes, whose kept records differ or whose records cannot be "
        "read is refused before anything is written",
    )
    return parser


def _seed_list(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers (e.g. 1,2)"
        ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("no seed given (e.g. --seeds 1,2)")
    return seeds


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of threads")
    return int(text)


def _raise_interrupted(signum, frame) -> None:
    from solo_bayesncl.benchmark.process import Interrupted

    raise Interrupted(signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        preset = load_preset(args.preset)
    except PresetError as err:
        return error_status(err)
    from solo_bayesncl.host.availability import quiet_third_party_warnings, require_solo_learn

    quiet_third_party_warnings()  # before solo-learn loads, as the pretraining command does
    require_solo_learn("the benchmark")
    from solo_bayesncl.benchmark.process import Interrupted, RunBusy, RunFailed, RunLockError
    from solo_bayesncl.benchmark.records import RecordsError
    from solo_bayesncl.benchmark.runner import (
        check_seeds,
        keep_records,
        run_benchmark,
        write_tables,
    )
    from solo_bayesncl.io.files import NoSpaceError

    if args.table_only or args.keep_records_from:
        try:
            check_seeds(preset, args.seeds)
            if args.seeds is not None:
                print(
                    f"[note] --seeds {','.join(map(str, args.seeds))}: the table covers every "
                    f"finished run of preset {preset.name} (--seeds chooses the runs to train)"
                )
            if args.keep_records_from:
                keep_records(preset, args.keep_records_from, args.out)
            else:
                write_tables(preset, args.out, protocol=args.protocol)
        except (PresetError, RecordsError, NoSpaceError) as err:
            return error_status(err)
        except RunFailed as err:
            return error_status(err, 1)
        return 0

    signal.signal(signal.SIGTERM, _raise_interrupted)
    start = time.perf_counter()
    try:
        run_benchmark(
            preset,
            args.out,
            protocol=args.protocol,
            seeds=args.seeds,
            leave_busy=args.leave_busy,
            threads=args.threads,
        )
    except (KeyboardInterrupt, Interrupted) as err:
        print("interrupted; run the same command again to resume", file=sys.stderr)
        return 128 + getattr(err, "signum", signal.SIGINT)
    except (PresetError, RunBusy, RunLockError, RecordsError) as err:
        return error_status(err)
    except RunFailed as err:
        return error_status(err, 1)
    out = Path(args.out or preset.out_dir).expanduser().resolve()
    print((out / "results.md").read_text(), end="")
    print(f"[done] {(time.perf_counter() - start) / 60:.1f} min")
    return 0

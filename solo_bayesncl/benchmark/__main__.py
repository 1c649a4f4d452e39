"""``python -m solo_bayesncl.benchmark --preset cpu [--out DIR] [--protocol standard|paper]``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from solo_bayesncl.benchmark.presets import available_presets, load_preset


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m solo_bayesncl.benchmark",
        description="SimCLR, MoCo v2+, NCL and BayesNCL side by side at equal budget.",
    )
    parser.add_argument(
        "--preset", required=True, help=f"one of {', '.join(available_presets())} or a YAML file"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="results folder (default: the preset's out_dir)"
    )
    parser.add_argument(
        "--protocol",
        choices=("standard", "paper"),
        default="standard",
        help="paper: add the official BayesNCL evaluation's figures (consistency x100, "
        "training-mode BatchNorm, ...) beside the standard ones; see docs/fidelity.md",
    )
    args = parser.parse_args(argv)
    from solo_bayesncl.registration import require_solo_learn

    require_solo_learn("the benchmark")
    try:
        preset = load_preset(args.preset)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from solo_bayesncl.benchmark.runner import run_benchmark

    start = time.perf_counter()
    run_benchmark(preset, args.out, protocol=args.protocol)
    print(f"[done] {(time.perf_counter() - start) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

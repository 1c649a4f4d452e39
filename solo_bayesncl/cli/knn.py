"""``solo-bayesncl-knn`` / ``python main_knn.py``: kNN evaluation of a checkpoint.

    python main_knn.py CHECKPOINT [--dataset fashion-mnist] [--k 10 20] [--temperature 0.07]
        [--feature backbone|projection] [--distance cosine|euclidean]

The data defaults to the dataset the checkpoint was trained on (its ``args.json``). Prints one
line per setting and writes them as JSON with ``--output``
(:func:`solo_bayesncl.evaluation.knn.knn_eval`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from solo_bayesncl.cli.console import input_errors
from solo_bayesncl.evaluation.knn import DISTANCES, FEATURES, knn_eval
from solo_bayesncl.host.availability import quiet_third_party_warnings, require_solo_learn

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--dataset", default=None, help="defaults to the checkpoint's dataset")
    parser.add_argument("--k", type=int, nargs="+", default=[20])
    parser.add_argument("--temperature", type=float, default=0.07)
    parser.add_argument("--feature", choices=tuple(FEATURES), default="backbone")
    parser.add_argument("--distance", choices=DISTANCES, default="cosine")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None, help="write the results as JSON")
    argv = sys.argv[1:] if argv is None else list(argv)
    if not {"-h", "--help"} & set(argv):
        require_solo_learn("solo-bayesncl-knn")
    args = parser.parse_args(argv)

    quiet_third_party_warnings()
    # bad options, unreadable checkpoints and NaN features: one line and exit status 2
    with input_errors("solo-bayesncl-knn"):
        if args.output is not None:  # before the kNN work, not after it
            from solo_bayesncl.io.files import require_writable

            if args.output.is_dir():
                raise ValueError(f"--output {args.output} is a folder; give a file name")
            if not args.output.parent.is_dir():
                raise FileNotFoundError(
                    f"--output {args.output}: the folder {args.output.parent} does not exist"
                )
            require_writable(args.output.parent, what="--output")
        results = knn_eval(
            args.checkpoint,
            args.k,
            args.temperature,
            args.feature,
            args.distance,
            args.dataset,
            args.batch_size,
            args.num_workers,
        )
    for key, value in results.items():
        print(f"{key}: {value:.2f}")
    if args.output is not None:
        args.output.write_text(json.dumps(results, indent=2) + "\n")
    return 0

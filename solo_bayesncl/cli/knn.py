"""``solo-bayesncl-knn`` / ``python main_knn.py``: kNN evaluation of a checkpoint
(:func:`solo_bayesncl.evaluation.knn.knn_eval`), one line per setting, as JSON with ``--output``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from solo_bayesncl.cli.console import input_errors
from solo_bayesncl.cli.invocation import command_name
from solo_bayesncl.evaluation import knn
from solo_bayesncl.evaluation.knn import DISTANCES, FEATURES, knn_eval
from solo_bayesncl.host.availability import quiet_third_party_warnings, require_solo_learn

__all__ = ["COMMAND", "build_parser", "main"]


COMMAND = "solo-bayesncl-knn"  # the installed console script


def build_parser() -> argparse.ArgumentParser:
    """The command line, named as the user ran it; every option says its default."""
    parser = argparse.ArgumentParser(
        prog=command_name(COMMAND),
        description="kNN evaluation of a pretrained checkpoint: top-1 and top-5 accuracy of "
        "classifying the validation images by a weighted vote of their k nearest training "
        "images in the checkpoint's feature space.",
    )
    parser.add_argument(
        "checkpoint", help="pretrained checkpoint: a .ckpt beside its args.json, or a zoo artifact"
    )
    parser.add_argument(
        "--dataset",
        default=None,
        metavar="NAME_OR_FOLDER",
        help="dataset name (e.g. fashion-mnist) or image folder to evaluate on "
        "(default: the dataset the checkpoint was trained on)",
    )
    parser.add_argument(
        "--k",
        type=int,
        nargs="+",
        default=[knn.K],
        metavar="K",
        help=f"neighbours in the vote; several give one result each (default: {knn.K})",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        default=knn.TEMPERATURE,
        help="temperature of the vote's weights exp(similarity / T), cosine distance only "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--feature",
        choices=tuple(FEATURES),
        default="backbone",
        help="backbone: the backbone's features (the linear probe's input); projection: the "
        "representation the interpretability metrics read (the normalised projection, gated "
        "for bayesncl) (default: %(default)s)",
    )
    parser.add_argument(
        "--distance",
        choices=DISTANCES,
        default="cosine",
        help="cosine (weights from the temperature) or euclidean (weights 1 / distance) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        default=knn.BATCH_SIZE,
        help="images per batch of feature extraction (default: %(default)s)",
    )
    parser.add_argument(
        "--num-workers",
        type=int,
        metavar="N",
        default=knn.NUM_WORKERS,
        help="data loader processes (default: %(default)s)",
    )
    parser.add_argument(
        "--threads",
        metavar="N",
        default=None,
        help="torch's CPU threads (default: OMP_NUM_THREADS if set, else the cores this process "
        "may use; the count changes the features' rounding)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        default=None,
        help="also write the results to this JSON file (default: print them only)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    command = command_name(COMMAND)
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not {"-h", "--help"} & set(argv):
        require_solo_learn(command)
    args = parser.parse_args(argv)

    quiet_third_party_warnings()
    # bad options, unreadable checkpoints and NaN features: one line and exit status 2
    with input_errors(command):
        from solo_bayesncl.core.threads import apply_threads, resolve_threads

        apply_threads(resolve_threads(args.threads))  # before any work
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

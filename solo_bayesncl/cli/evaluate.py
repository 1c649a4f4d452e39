"""``solo-bayesncl-evaluate`` / ``python -m solo_bayesncl.evaluation``: the evaluation report
(:mod:`solo_bayesncl.evaluation.report` says what its folder holds)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from solo_bayesncl.cli.invocation import command_name, error_status
from solo_bayesncl.host.availability import quiet_third_party_warnings, require_solo_learn

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=command_name("solo-bayesncl-evaluate"),  # as the user ran it
        description="Evaluate a pretrained checkpoint (bayesncl, ncl, simclr, mocov2plus) on a "
        "validation set and write a report folder: metrics.json, metrics.md, PNG pictures and "
        "features.npz (the dashboard's input).",
    )
    parser.add_argument("checkpoint", help="checkpoint file (.ckpt beside its args.json, or zoo)")
    parser.add_argument("--out", required=True, type=Path, help="report folder to write")
    parser.add_argument(
        "--dataset",
        default=None,
        help="dataset name (e.g. fashion-mnist) or image folder; default: the checkpoint's",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--max-images", type=int, default=None, help="evaluate a random subset")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--top-dims", type=int, default=16, help="dimensions in the pictures")
    parser.add_argument(
        "--images-per-dim",
        type=int,
        default=None,
        help="top images per dimension: a picture row and the images the purity of the top "
        "images is taken over (default 8, the dashboard's count)",
    )
    parser.add_argument("--shuffle-permutations", type=int, default=5)
    parser.add_argument("--retrieval-max-samples", type=int, default=None)
    parser.add_argument(
        "--protocol",
        default="standard",
        help="standard, paper or ncl-paper; paper: add the official BayesNCL evaluation's figures "
        "(training-mode BatchNorm, consistency x100, ...) beside the standard ones; ncl-paper: "
        "the NCL repository's evaluation figures instead (sparsity below 1e-2, L2 retrieval, ...); "
        "see docs/fidelity.md",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    require_solo_learn(command_name("solo-bayesncl-evaluate"))
    quiet_third_party_warnings()
    import torch

    from solo_bayesncl.data.resolve import DatasetUnavailableError
    from solo_bayesncl.evaluation.report import ReportError, ReportOptions, write_report
    from solo_bayesncl.io.checkpoints import CheckpointError
    from solo_bayesncl.io.files import NoSpaceError

    if args.device == "cuda" and not torch.cuda.is_available():
        return error_status("--device cuda was given but no CUDA GPU is available")
    try:
        options = ReportOptions(
            dataset=args.dataset,
            batch_size=args.batch_size,
            max_images=args.max_images,
            device=args.device,
            num_workers=args.num_workers,
            shuffle_permutations=args.shuffle_permutations,
            retrieval_max_samples=args.retrieval_max_samples,
            top_dims=args.top_dims,
            **({} if args.images_per_dim is None else {"images_per_dim": args.images_per_dim}),
            protocol=args.protocol,
        )
        report = write_report(
            args.checkpoint,
            args.out,
            options,
            overwrite=args.overwrite,
            progress=not args.no_progress,
        )
    except (
        CheckpointError,
        ReportError,
        DatasetUnavailableError,
        FileNotFoundError,
        NoSpaceError,
    ) as err:
        return error_status(err)
    m = report["metrics"]
    print(
        f"{report['method']} on {report['dataset']} ({report['num_images']} images): "
        f"consistency {m['semantic_consistency']:.4f}"
        + (
            f" (shuffled {m['semantic_consistency_shuffled']:.4f})"
            if "semantic_consistency_shuffled" in m
            else ""
        )
        + f", sparsity {m['sparsity']:.4f}, active dims {int(m['active_dims'])}"
    )
    print(f"report written to {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

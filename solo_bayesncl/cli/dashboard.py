"""Command line: ``python -m solo_bayesncl.dashboard REPORT_DIR [--compare OTHER] --out DIR``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from solo_bayesncl.cli.invocation import command_name, error_status
from solo_bayesncl.dashboard.builder import build_dashboard
from solo_bayesncl.dashboard.sprites import FORMATS
from solo_bayesncl.io.files import NoSpaceError
from solo_bayesncl.metrics import MIN_SUPPORT


def _share(text: str) -> float:
    """A share of the images, 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a share of the images (0 to 1)")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=command_name("solo-bayesncl-dashboard"),  # as the user ran it
        description="Build a static, offline feature dashboard from an evaluation report folder "
        "(features.npz + metrics.json). Open OUT/index.html in a browser; no server needed.",
    )
    parser.add_argument("report_dir", help="report folder holding features.npz")
    parser.add_argument(
        "--out",
        required=True,
        help="output folder (created; an earlier dashboard there is replaced)",
    )
    parser.add_argument(
        "--compare", default=None, help="a second report folder over the same classes"
    )
    parser.add_argument("--top-k", type=int, default=16, help="top images per dimension")
    parser.add_argument(
        "--top-purity-images",
        type=int,
        default=None,
        help="top images the purity of the top images is taken over (shown on each card); "
        "default: the report's own count (8 unless it was given --images-per-dim)",
    )
    parser.add_argument(
        "--min-support",
        type=_share,
        default=MIN_SUPPORT,
        help="share of the images a dimension must fire on to lead the default order and to "
        f"pass the index's filter at first (default {MIN_SUPPORT:g}: 1%%)",
    )
    parser.add_argument("--n-random", type=int, default=8, help="random active images per dim")
    parser.add_argument("--bins", type=int, default=24, help="activation histogram bins")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random samples")
    parser.add_argument(
        "--thumb-format", choices=sorted(FORMATS), default="jpeg", help="sprite sheet format"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        index = build_dashboard(
            args.report_dir,
            args.out,
            compare_dir=args.compare,
            top_k=args.top_k,
            top_purity_images=args.top_purity_images,
            min_support=args.min_support,
            n_random=args.n_random,
            n_bins=args.bins,
            seed=args.seed,
            thumb_format=args.thumb_format,
        )
    except (
        FileNotFoundError,
        FileExistsError,
        KeyError,
        ValueError,
        NotADirectoryError,
        PermissionError,
        NoSpaceError,
    ) as err:
        return error_status(err.args[0] if isinstance(err, KeyError) and err.args else err)
    print(index.resolve().as_uri())
    return 0

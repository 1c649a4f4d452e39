"""How the commands behave in a terminal: quiet start, one-line input errors, run summaries, and
Hydra entry points that find the shipped configs from any folder.

Only the entry points call these; importing the library changes no global state.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import omegaconf

from solo_bayesncl.config.shipped import resolve_config_dir
from solo_bayesncl.host.availability import quiet_third_party_warnings, require_solo_learn
from solo_bayesncl.training.trainer import run_summary

__all__ = [
    "INPUT_ERRORS",
    "hydra_entry_point",
    "input_errors",
    "print_run_summary",
]

INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # config checks, CheckpointError
    FileNotFoundError,  # data files
    RuntimeError,  # DatasetUnavailableError, accelerator=gpu without a GPU
    AssertionError,  # solo-learn's parse_cfg checks with assert
    omegaconf.errors.OmegaConfBaseException,  # a missing or mistyped key
)
"""What a bad config or missing input raises while a run is being prepared."""


@contextlib.contextmanager
def input_errors(command: str) -> Iterator[None]:
    """Turns an input error raised inside the block into one line on stderr and exit status 2.

    Wrap only the preparation of a run (config checks, data checks, checkpoint loading), never
    the training, so that a genuine failure keeps its traceback.
    """
    try:
        yield
    except INPUT_ERRORS as err:
        message = str(err).strip() or type(err).__name__
        first, _, _ = message.partition("\n    full_key:")  # omegaconf appends key context
        sys.stderr.write(f"{command}: error: {first.strip()}\n")
        raise SystemExit(2) from None


def print_run_summary(title: str, trainer) -> dict[str, str | float | None]:
    """Prints :func:`solo_bayesncl.training.trainer.run_summary` after a run, one item per line; returns it."""
    summary = run_summary(trainer)
    acc = summary["val_acc1"]
    lines = [
        f"== {title} finished",
        f"last validation top-1: {'n/a (no validation data)' if acc is None else f'{acc:.2f}%'}",
        f"checkpoint:  {summary['checkpoint'] or 'none (checkpoint.enabled=False)'}",
        f"metrics.csv: {summary['metrics_csv'] or 'none'}",
    ]
    print("\n".join(lines), flush=True)
    return summary


def _absolute_config_path(argv: Sequence[str]) -> list[str]:
    """``--config-path``/``-cp`` made absolute: Hydra would read a relative one against the
    installed module's folder, we read it against the current folder or the shipped configs."""
    args = list(argv)
    for i, arg in enumerate(args):
        for flag in ("--config-path", "-cp"):
            if arg == flag and i + 1 < len(args):
                args[i + 1] = str(resolve_config_dir(args[i + 1]))
            elif arg.startswith(flag + "="):
                args[i] = f"{flag}={resolve_config_dir(arg[len(flag) + 1 :])}"
    return args


def hydra_entry_point(
    task: Callable[[omegaconf.DictConfig], None],
    config_dir: Path,
    config_name: str,
    command: str,
) -> int:
    """Runs ``task`` as a Hydra app on ``sys.argv`` with the shipped ``config_dir`` as default
    config path; every Hydra flag (``--help``, ``--cfg job``, ``--config-name``, overrides) works
    as in solo-learn's scripts."""
    import hydra

    quiet_third_party_warnings()
    help_only = any(
        a in ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info") for a in sys.argv
    )
    if not help_only:
        require_solo_learn(command)
    with input_errors(command):
        sys.argv = [sys.argv[0], *_absolute_config_path(sys.argv[1:])]
    app = hydra.main(version_base="1.2", config_path=str(config_dir), config_name=config_name)
    app(task)()
    return 0

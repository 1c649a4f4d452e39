"""How the commands behave in a terminal: quiet start, one-line input errors, run summaries, and
Hydra entry points that find the shipped configs from any folder and list them in ``--help``."""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import omegaconf

from solo_bayesncl.cli.invocation import EXIT_STATUS, command_name, interrupt_normally
from solo_bayesncl.config.shipped import resolve_config_dir, shipped_configs
from solo_bayesncl.core.distributed import launched_as_rank_zero
from solo_bayesncl.core.validation import INPUT_ERRORS, first_line
from solo_bayesncl.host.availability import quiet_third_party_warnings, require_solo_learn
from solo_bayesncl.training.summary import run_summary
from solo_bayesncl.training.trainer import PeersNotMet

__all__ = [
    "hydra_entry_point",
    "hydra_help_text",
    "input_errors",
    "input_errors_until_fit",
    "exit_if_interrupted",
    "print_run_summary",
]


@contextlib.contextmanager
def input_errors(command: str) -> Iterator[None]:
    """Turns an input error raised inside the block into one line on stderr and exit status 2.
    Wrap only the preparation of a run, so that a failure in training keeps its traceback."""
    try:
        yield
    except INPUT_ERRORS as err:
        sys.stderr.write(f"{command}: error: {first_line(err)}\n")
        raise SystemExit(2) from None


@contextlib.contextmanager
def input_errors_until_fit(command: str) -> Iterator[list]:
    """:func:`input_errors` until the Trainer's fit begins: the block gets a list to pass as extra
    Lightning callbacks, which tell when it does. Processes of a job that never all connect
    (:class:`~solo_bayesncl.training.trainer.PeersNotMet`) give one line and exit status 1."""
    from lightning.pytorch import Callback

    started: list[bool] = []

    class FitStarted(Callback):
        def setup(self, trainer, pl_module, stage: str) -> None:
            started.append(True)
            interrupt_normally()  # Lightning stops a fit on Ctrl-C, with a summary

    try:
        yield [FitStarted()]
    except PeersNotMet as err:
        sys.stderr.write(f"{command}: error: {first_line(err)}\n")
        raise SystemExit(1) from None
    except INPUT_ERRORS as err:
        if started:
            raise
        sys.stderr.write(f"{command}: error: {first_line(err)}\n")
        raise SystemExit(2) from None


#: The command's name and ``sys.argv`` as typed, recorded before Hydra rewrites ``sys.argv``.
_INVOCATION: list[str] = []


def _command_line() -> str:
    """The command line that runs this command again, named as the user ran it."""
    command, argv0, *args = _INVOCATION or [sys.argv[0], *sys.argv]
    if argv0.endswith(".py") and Path(argv0).name != "__main__.py":
        command = f"python {shlex.quote(argv0)}"
    return " ".join([command, *map(shlex.quote, args)])


def _checkpoint_line(summary: dict) -> str:
    if summary["checkpoint"]:
        return summary["checkpoint"]
    if not summary["checkpointing"]:
        return "none (checkpoint.enabled=False)"
    if summary["interrupted"]:
        return (
            "none (interrupted before the first checkpoint; its folder "
            f"{summary['folder']} was removed)"
        )
    return "none"


def _end_progress_lines(trainer) -> None:
    """Closes the progress bars an interrupted fit left open (Lightning closes them only at the
    end of training), so that what follows starts on its own line."""
    bar = getattr(trainer, "progress_bar_callback", None)
    if bar is None:
        return
    for name in ("_val_progress_bar", "_train_progress_bar"):  # TQDMProgressBar's
        progress = getattr(bar, name, None)
        if progress is not None and hasattr(progress, "close"):
            progress.close()


def print_run_summary(title: str, trainer, resumes: bool = True) -> dict[str, str | float | None]:
    """Prints :func:`solo_bayesncl.training.summary.run_summary` from global rank 0, one item per
    line, with the command that resumes an interrupted run (or, unless it ``resumes``, starts it
    over); returns it."""
    summary = run_summary(trainer)
    if not trainer.is_global_zero:
        return summary
    if summary["interrupted"]:
        _end_progress_lines(trainer)
    acc = summary["val_acc1"]
    ended = f"interrupted at {summary['interrupted']}" if summary["interrupted"] else "finished"
    lines = [
        f"== {title} {ended}",
        f"last validation top-1: {'n/a (no validation data)' if acc is None else f'{acc:.2f}%'}",
        f"checkpoint:  {_checkpoint_line(summary)}",
        f"metrics.csv: {summary['metrics_csv'] or 'none'}",
    ]
    if summary["interrupted"]:
        again = "resume with the same command" if resumes else "run it again (it starts over)"
        lines.append(f"{again}: {_command_line()}")
    print("\n".join(lines), flush=True)
    return summary


def exit_if_interrupted(summary: dict) -> None:
    """Ends the process with :data:`EXIT_STATUS` when ``summary`` is of an interrupted run. The
    job's status is the first process's: the others of a job end with 0 once stopped, since a
    launcher (Lightning's, torchrun) takes a non-zero status for a crash and kills the job, the
    first process before it has told the story."""
    if summary.get("signal") and launched_as_rank_zero():
        raise SystemExit(EXIT_STATUS[str(summary["signal"])])


def _absolute_config_path(argv: Sequence[str]) -> list[str]:
    """``--config-path``/``-cp`` made absolute (Hydra would read a relative one against the
    installed module's folder)."""
    args = list(argv)
    for i, arg in enumerate(args):
        for flag in ("--config-path", "-cp"):
            if arg == flag and i + 1 < len(args):
                args[i + 1] = str(resolve_config_dir(args[i + 1]))
            elif arg.startswith(flag + "="):
                args[i] = f"{flag}={resolve_config_dir(arg[len(flag) + 1 :])}"
    return args


_OVERRIDE = re.compile(r"(\+{0,2}[A-Za-z_][\w.]*)=(.+)")
_GRAMMAR = set("'\"()[]{},$ ")


def _quoted_paths(argv: Sequence[str]) -> list[str]:
    """``KEY=PATH`` overrides whose path holds ``=`` (``NAME-ep=1.ckpt``) quoted for Hydra's
    grammar, which refuses them unquoted, so no valid command changes. Values with Hydra's
    quotes, brackets or interpolations are kept."""
    args = list(argv)
    for i, arg in enumerate(args):
        match = _OVERRIDE.fullmatch(arg)
        if not match:  # a flag (--config-name ...) or a value of one
            continue
        key, value = match.groups()
        if "=" in value and "/" in value and not _GRAMMAR & set(value):
            args[i] = f"{key}='{value}'"
    return args


_HELP_FLAGS = ("--help", "-h")
_HELP_WIDTH = 100


def hydra_help_text(
    command: str, summary: str, config_dir: Path, config_name: str, keys: Sequence[tuple[str, str]]
) -> str:
    """The head of a Hydra command's ``--help``: usage, ``summary``, the shipped configs of its
    kind by folder with the default (``config_dir``, ``config_name``), and the ``keys`` set most
    often with their meanings."""
    kind = config_dir.parent.name
    configs = shipped_configs(kind)
    width = max(map(len, configs))
    key_width = max(len(key) for key, _ in keys)
    indent = " " * (key_width + 4)
    lines = [
        f"usage: {command} [--config-path FOLDER] [--config-name NAME] [KEY=VALUE ...]",
        "",
        *textwrap.wrap(summary, _HELP_WIDTH),
        "",
        "Shipped configs, by folder (--config-path FOLDER --config-name NAME;",
        f"default: --config-path scripts/{kind}/{config_dir.name} "
        f"--config-name {config_name}.yaml):",
        *(f"  {folder:<{width}}  {' '.join(names)}" for folder, names in configs.items()),
        "",
        "Keys set most often (KEY=VALUE; any key of the config below can be set):",
        *(
            textwrap.fill(
                meaning,
                _HELP_WIDTH,
                initial_indent=f"  {key:<{key_width}}  ",
                subsequent_indent=indent,
            )
            for key, meaning in keys
        ),
        "",
        "--cfg job prints the composed config and runs nothing; --hydra-help shows Hydra's flags.",
        "",
    ]
    return "\n".join(lines)


def hydra_entry_point(
    task: Callable[[omegaconf.DictConfig], None],
    config_dir: Path,
    config_name: str,
    console_script: str,
    summary: str,
    keys: Sequence[tuple[str, str]],
) -> int:
    """Runs ``task`` as a Hydra app on ``sys.argv`` with the shipped ``config_dir`` as default
    config path; ``--help`` prints :func:`hydra_help_text` before Hydra's help."""
    import hydra

    command = command_name(console_script)
    _INVOCATION[:] = [command, *sys.argv]
    quiet_third_party_warnings()
    help_only = any(
        a in ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info") for a in sys.argv
    )
    if not help_only:
        require_solo_learn(command)
    with input_errors(command):
        sys.argv = [sys.argv[0], *_absolute_config_path(_quoted_paths(sys.argv[1:]))]
    if any(a in _HELP_FLAGS for a in sys.argv[1:]):
        print(hydra_help_text(command, summary, config_dir, config_name, keys), flush=True)
        sys.argv.append("hydra.help.header=")  # ours replaces "<app> is powered by Hydra."
    app = hydra.main(version_base="1.2", config_path=str(config_dir), config_name=config_name)
    app(task)()
    return 0

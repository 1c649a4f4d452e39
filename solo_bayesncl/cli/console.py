"""How the commands behave in a terminal: quiet start, one-line input errors, run summaries, and
Hydra entry points that find the shipped configs from any folder and list them in ``--help``.

Only the entry points call these; importing the library changes no global state.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import omegaconf

from solo_bayesncl.cli.invocation import command_name
from solo_bayesncl.config.shipped import resolve_config_dir, shipped_configs
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

    Wrap only the preparation of a run (config checks, data checks, checkpoint loading), never
    the training, so that a genuine failure keeps its traceback.
    """
    try:
        yield
    except INPUT_ERRORS as err:
        sys.stderr.write(f"{command}: error: {first_line(err)}\n")
        raise SystemExit(2) from None


@contextlib.contextmanager
def input_errors_until_fit(command: str) -> Iterator[list]:
    """:func:`input_errors` for the whole start of a run: the block gets a list to pass as extra
    Lightning callbacks, and an input error raised before the Trainer's fit begins (building
    the model, the datasets, the loaders) is one line and exit status 2; once the fit has begun,
    errors keep their traceback. Processes of a job that never all connect
    (:class:`~solo_bayesncl.training.trainer.PeersNotMet`) are one line and exit status 1."""
    from lightning.pytorch import Callback

    started: list[bool] = []

    class FitStarted(Callback):
        def setup(self, trainer, pl_module, stage: str) -> None:
            started.append(True)

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


_INVOCATION: list[str] = []
"""The command's name and ``sys.argv`` as the user typed them (:func:`hydra_entry_point` records
them before Hydra reads ``sys.argv``), for the summary of an interrupted run."""

EXIT_STATUS = {"SIGINT": 130, "SIGTERM": 143}
"""The exit status of a run stopped by a signal, as a shell reports a process killed by it."""


def _command_line() -> str:
    """The command line that runs this command again: ``python main_pretrain.py ...`` for a
    script, ``python -m ...`` for a module, the console script's name otherwise."""
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


def print_run_summary(title: str, trainer, resumes: bool = True) -> dict[str, str | float | None]:
    """Prints :func:`solo_bayesncl.training.summary.run_summary` after a run, one item per line;
    returns it. In a job of several processes only global rank 0 prints (the others return the
    same summary).

    A finished run reads ``== <title> finished``; an interrupted one ``== <title> interrupted at
    epoch E, step S``, then the checkpoint to resume from and the command that does (the same
    command line; a run that does not ``resumes`` starts over with it). Raise
    :func:`exit_if_interrupted` after it."""
    summary = run_summary(trainer)
    if not trainer.is_global_zero:
        return summary
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
    """Ends the process with status 130 (SIGINT) or 143 (SIGTERM) when ``summary`` (from
    :func:`print_run_summary`) is of an interrupted run, as a shell reports a killed process."""
    if summary.get("signal"):
        raise SystemExit(EXIT_STATUS[str(summary["signal"])])


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


_OVERRIDE = re.compile(r"(\+{0,2}[A-Za-z_][\w.]*)=(.+)")
_GRAMMAR = set("'\"()[]{},$ ")


def _quoted_paths(argv: Sequence[str]) -> list[str]:
    """``KEY=PATH`` overrides whose path holds ``=`` (Lightning names checkpoints
    ``NAME-ep=1.ckpt``) quoted for Hydra, whose override grammar refuses an unquoted ``=`` in a
    value ("mismatched input '='"): so such a value is never valid unquoted, and quoting it
    changes no valid command. Values with Hydra's quotes, brackets or interpolations are kept."""
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
    command: str,
    summary: str,
    kind: str,
    default: tuple[str, str],
    keys: Sequence[tuple[str, str]],
) -> str:
    """The head of a Hydra command's ``--help``: usage, ``summary``, the shipped configs of
    ``kind`` by folder (:func:`~solo_bayesncl.config.shipped.shipped_configs`) with the
    ``default`` (folder, config name), and the ``keys`` set most often, each with its meaning.
    Hydra's own help (the config groups and the composed config) follows it."""
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
        f"default: --config-path {default[0]} --config-name {default[1]}):",
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
    help_text: Callable[[str], str],
) -> int:
    """Runs ``task`` as a Hydra app on ``sys.argv`` with the shipped ``config_dir`` as default
    config path; every Hydra flag (``--help``, ``--cfg job``, ``--config-name``, overrides) works
    as in solo-learn's scripts. ``--help`` prints ``help_text(command)`` first (the command as
    the user ran it, :func:`~solo_bayesncl.cli.invocation.command_name` of ``console_script``),
    then Hydra's help without its header."""
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
        print(help_text(command), flush=True)
        sys.argv.append("hydra.help.header=")  # ours replaces "<app> is powered by Hydra."
    app = hydra.main(version_base="1.2", config_path=str(config_dir), config_name=config_name)
    app(task)()
    return 0

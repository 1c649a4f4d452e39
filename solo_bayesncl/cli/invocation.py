"""The name of a command as the user ran it, for its usage and ``error:`` lines, the one way
an argparse command reports an error, and a command started so that a Ctrl-C before its run
(while torch and solo-learn load, seconds) is one line, as a Ctrl-C during training is."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from pathlib import Path

__all__ = ["EXIT_STATUS", "command_name", "error_status", "interrupt_normally", "run_main"]

_PACKAGE = "solo_bayesncl"

#: The exit status of a run stopped by a signal, as a shell reports a process killed by it.
EXIT_STATUS = {"SIGINT": 130, "SIGTERM": 143}


def command_name(console_script: str) -> str:
    """How the running command was invoked, from ``sys.argv[0]``: a script's file name
    (``main_pretrain.py``), ``python -m <package>`` for a ``__main__`` module of this package,
    else ``console_script``, its installed name."""
    argv0 = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if argv0 == "__main__.py":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = getattr(spec, "name", "") or ""
        if module.split(".")[0] == _PACKAGE:
            return f"python -m {module.removesuffix('.__main__')}"
        return console_script
    if argv0.endswith(".py"):
        return argv0
    return console_script


def error_status(err: object, status: int = 2) -> int:
    """Prints ``error: <err>`` on stderr; returns ``status``, the command's exit status."""
    print(f"error: {err}", file=sys.stderr)
    return status


#: The Ctrl-C handler :func:`run_main` set, while it is in place.
_EARLY_HANDLER: list = []


def run_main(
    module: str,
    title: str,
    stopped: str = "while starting; nothing was trained",
    until_fit: bool = True,
) -> int:
    """Imports the command ``module`` (``solo_bayesncl.cli.pretrain``) and returns its
    ``main()``'s status. A Ctrl-C before training starts (``until_fit``: until
    :func:`interrupt_normally`; else during the imports) prints ``== <title> interrupted (SIGINT)
    <stopped>`` in one line and ends the process at once with :data:`EXIT_STATUS`'s 130: nothing
    has been written yet, and an import interrupted midway (which a library may catch and half
    survive) never runs on. The scripts ``main_*.py`` start so."""
    line = f"== {title} interrupted (SIGINT) {stopped}"

    def stop_now(signum, frame) -> None:
        print(line, flush=True)
        os._exit(EXIT_STATUS["SIGINT"])

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored (nohup &)
        _EARLY_HANDLER[:] = [stop_now]
        signal.signal(signal.SIGINT, stop_now)
    try:
        command = importlib.import_module(module)
        if not until_fit:
            interrupt_normally()
        return command.main()
    except KeyboardInterrupt:
        print(line, flush=True)
        return EXIT_STATUS["SIGINT"]
    finally:
        interrupt_normally()


def interrupt_normally() -> None:
    """Ctrl-C raises KeyboardInterrupt again (which training turns into a summary and a
    checkpoint to resume from) where :func:`run_main` had made it end the process."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread sets handlers (and run_main's runs there)
    if _EARLY_HANDLER and signal.getsignal(signal.SIGINT) is _EARLY_HANDLER[0]:
        signal.signal(signal.SIGINT, signal.default_int_handler)

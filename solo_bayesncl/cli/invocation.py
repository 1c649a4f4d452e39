"""The name of a command as the user ran it, for its usage and ``error:`` lines, the one way
an argparse command reports an error, and a command started so that a Ctrl-C before its run
(while torch and solo-learn load, seconds) is one line, as a Ctrl-C during training is."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

__all__ = ["EXIT_STATUS", "command_name", "error_status", "run_main"]

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


def run_main(module: str, title: str, stopped: str = "while starting; nothing was trained") -> int:
    """Imports the command ``module`` (``solo_bayesncl.cli.pretrain``) and returns its
    ``main()``'s status. A Ctrl-C that reaches here, during the imports or the preparation of
    the run (training handles its own), prints ``== <title> interrupted (SIGINT) <stopped>`` in
    one line and returns :data:`EXIT_STATUS`'s 130; the scripts ``main_*.py`` start so."""
    try:
        return importlib.import_module(module).main()
    except KeyboardInterrupt:
        print(f"== {title} interrupted (SIGINT) {stopped}", flush=True)
        return EXIT_STATUS["SIGINT"]

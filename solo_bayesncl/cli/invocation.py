"""The name of a command as the user ran it, for its usage and ``error:`` lines, and the one way
an argparse command reports an error."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["command_name", "error_status"]

_PACKAGE = "solo_bayesncl"


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

"""The name of a command as the user ran it, for its usage and ``error:`` lines.

One command runs three ways: the installed console script (``solo-bayesncl-pretrain``), a script
of the checkout (``python main_pretrain.py``) or a module (``python -m solo_bayesncl.benchmark``).
Its messages name the one the user typed, read from ``sys.argv[0]``: the script's file name
(``main_pretrain.py``, as argparse names a script), ``python -m <package>`` for a ``__main__``
module of this package, and otherwise (the console script, or ``main()`` called from Python) the
console script's name.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["command_name"]

_PACKAGE = "solo_bayesncl"


def command_name(console_script: str) -> str:
    """How the running command was invoked; ``console_script`` is its installed name (from
    ``pyproject.toml``'s ``[project.scripts]``), the answer when no script or module was run."""
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

"""How torch's CPU threads wait for work: passive, unless the user chose, set before torch loads.

torch's Linux wheels run their intra-op thread pool on GNU OpenMP (libgomp; the macOS wheels on
LLVM's libomp), which reads its settings from the environment once, when torch loads it. By
default a thread that has finished its share of a parallel region spins for a while
(``GOMP_SPINCOUNT``, 300,000 turns: milliseconds) before it sleeps. On idle cores that saves a
wake-up; on cores shared with other work the spinning threads take the time that the other
processes, and the slower threads of the same region, need (``microbenchmarks/bench_threads.py``
measures both ways, idle and beside busy processes).

:func:`apply_wait_policy`, which ``import solo_bayesncl`` calls first (every command imports the
package before torch), sets ``OMP_WAIT_POLICY=PASSIVE`` (a waiting thread sleeps at once) unless:

- torch is already imported: the runtime has read its settings, and a variable set now would
  only pretend;
- the user set ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT`` or ``KMP_BLOCKTIME`` (libomp's): theirs is
  kept;
- :data:`KEEP_DEFAULTS_ENV` is ``1``, ``true`` or ``yes``: the OpenMP runtime's own defaults.

Processes started afterwards (data loader workers, a benchmark's runs) inherit the environment.
"""

from __future__ import annotations

import os
import sys

__all__ = ["KEEP_DEFAULTS_ENV", "USER_SETTINGS", "WAIT_POLICY", "apply_wait_policy"]

WAIT_POLICY: tuple[str, str] = ("OMP_WAIT_POLICY", "PASSIVE")
"""The variable and the value the package sets."""

USER_SETTINGS: tuple[str, ...] = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
"""The variables with which a user chooses how threads wait; if either is set, nothing is set."""

KEEP_DEFAULTS_ENV = "SOLO_BAYESNCL_KEEP_OMP_DEFAULTS"
"""Set to ``1``, ``true`` or ``yes``: the package sets nothing (the OpenMP runtime's defaults)."""


def apply_wait_policy() -> bool:
    """Sets :data:`WAIT_POLICY` in ``os.environ`` where the module docstring says; True if set."""
    keep = os.environ.get(KEEP_DEFAULTS_ENV, "").strip().lower() in ("1", "true", "yes")
    if keep or "torch" in sys.modules or any(v in os.environ for v in USER_SETTINGS):
        return False
    name, value = WAIT_POLICY
    os.environ[name] = value
    return True

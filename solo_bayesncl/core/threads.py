"""How many CPU threads torch computes on, and how they wait, on cores other work already keeps
busy: decided once, when the package is imported, before torch loads.

torch's Linux wheels run their intra-op thread pool on GNU OpenMP (libgomp), which reads its
settings from the environment once, when torch loads it. By default it starts a thread per core
and a thread that has finished its share of a parallel region spins before it sleeps. On idle
cores that is the fastest; on cores that other processes keep busy, the spinning threads take
the time the others, and the slower threads of the same region, need
(``microbenchmarks/bench_threads.py`` measures both ways, idle and beside busy processes).

:func:`apply_thread_policy`, which ``import solo_bayesncl`` calls first (every command imports
the package before torch), counts the cores other processes keep busy over
:data:`SAMPLE_S` (``/proc/stat``). Where at least half a core is busy it sets
``OMP_NUM_THREADS`` to the cores left (at least 1) and ``OMP_WAIT_POLICY=PASSIVE`` (a waiting
thread sleeps at once); on idle cores it sets nothing. It sets nothing either when:

- torch is already imported: the runtime has read its settings, and a variable set now would
  only pretend;
- the user set any of :data:`USER_SETTINGS`: theirs is kept;
- :data:`KEEP_DEFAULTS_ENV` is ``1``, ``true`` or ``yes``: the OpenMP runtime's own defaults.

Processes started afterwards (data loader workers, a benchmark's runs) inherit the decision.
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["KEEP_DEFAULTS_ENV", "SAMPLE_S", "USER_SETTINGS", "apply_thread_policy", "busy_cores"]

USER_SETTINGS: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "KMP_BLOCKTIME",
)
"""The variables with which a user chooses torch's threads; if any is set, nothing is set."""

KEEP_DEFAULTS_ENV = "SOLO_BAYESNCL_KEEP_OMP_DEFAULTS"
"""Set to ``1``, ``true`` or ``yes``: the package sets nothing (the OpenMP runtime's defaults)."""

SAMPLE_S = 0.03
"""How long the busy cores are counted for: three of the kernel's 10 ms ticks per core."""


def _ticks() -> tuple[int, int]:
    """``(busy, all)`` CPU ticks of the machine since boot (the first line of ``/proc/stat``:
    user, nice, system, idle, iowait, irq, softirq, steal)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(x) for x in stat.readline().split()[1:9]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def busy_cores(seconds: float = SAMPLE_S) -> float:
    """The cores other processes keep busy, counted over ``seconds`` while this one sleeps; 0
    where ``/proc/stat`` cannot be read (not Linux)."""
    try:
        busy, total = _ticks()
        time.sleep(seconds)
        busy_after, total_after = _ticks()
    except (OSError, ValueError, IndexError):
        return 0.0
    elapsed = total_after - total
    return (busy_after - busy) / elapsed * (os.cpu_count() or 1) if elapsed > 0 else 0.0


def apply_thread_policy() -> dict[str, str]:
    """Sets in ``os.environ`` what the module docstring says, and returns what it set."""
    keep = os.environ.get(KEEP_DEFAULTS_ENV, "").strip().lower() in ("1", "true", "yes")
    if keep or "torch" in sys.modules or any(v in os.environ for v in USER_SETTINGS):
        return {}
    busy = busy_cores()
    if busy < 0.5:
        return {}
    chosen = {
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) - round(busy))),
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    os.environ.update(chosen)
    return chosen

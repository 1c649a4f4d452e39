"""How many CPU threads torch computes on: a setting of each run, never drawn from the load.

The thread count changes what a run computes (the kernels split their sums by thread, and
training amplifies the difference), so it is an input of every result, like the seed. A command
resolves it once (:func:`resolve_threads`): the ``threads`` key (``--threads`` for the
benchmark) when given; else ``OMP_NUM_THREADS`` when the user set it to a positive integer (any
other value is refused); else the cores this process may use (:func:`usable_cores`: its CPU
affinity, capped by the cgroup's CPU quota where one is set). It does not depend on how busy the
machine is. The command then gives torch that count (:func:`apply_threads`) and records it with
the run; a resumed run trains on the count its checkpoint recorded (:data:`CHECKPOINT_KEY`).

How idle OpenMP threads wait (``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``) is left to the runtime and
the user: nothing here sets it. Importing the package changes no environment variable.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from solo_bayesncl.core.validation import ConfigError

__all__ = [
    "CHECKPOINT_KEY",
    "KEY",
    "apply_threads",
    "cgroup_cpu_limit",
    "resolve_threads",
    "resumed_threads",
    "usable_cores",
]

KEY = "threads"
"""The config key (top level) of a run's thread count."""

CHECKPOINT_KEY = "solo_bayesncl_threads"
"""The entry of a checkpoint holding the thread count the run trained with."""

_CGROUP_ROOT = Path("sys/fs/cgroup")
_V1_CPU_MOUNTS = ("cpu,cpuacct", "cpu", "cpuacct,cpu")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _quota(text: str | None) -> float | None:
    """``quota period`` (cgroup v2 ``cpu.max``) as cores, None for ``max`` or unreadable."""
    fields = (text or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _levels(mount: Path, inside: str) -> list[Path]:
    """The cgroup folder of this process under ``mount`` and its parents up to ``mount``; just
    ``mount`` when the path is not there (a container sees its own cgroup as the root)."""
    folder = mount / inside.strip("/")
    if not folder.is_dir():
        return [mount]
    return [folder, *[p for p in folder.parents if p == mount or mount in p.parents]]


def cgroup_cpu_limit(root: Path = Path("/")) -> float | None:
    """The CPU quota of this process's cgroup and its parents, in cores (the smallest), or None
    where none is set. cgroup v2: ``cpu.max``; v1: ``cpu.cfs_quota_us / cpu.cfs_period_us``
    (``-1``: none). ``root`` is the file system's root (tests give a fake one)."""
    limits: list[float] = []
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, inside = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            for level in _levels(root / _CGROUP_ROOT, inside):
                limits.append(_quota(_read(level / "cpu.max")) or math.inf)
        elif "cpu" in controllers.split(","):
            for name in _V1_CPU_MOUNTS:
                mount = root / _CGROUP_ROOT / name
                if mount.is_dir():
                    for level in _levels(mount, inside):
                        pair = f"{_read(level / 'cpu.cfs_quota_us')} {_read(level / 'cpu.cfs_period_us')}"
                        limits.append(_quota(pair) or math.inf)
                    break
    limit = min(limits, default=math.inf)
    return None if limit == math.inf else limit


def usable_cores(root: Path = Path("/")) -> int:
    """The cores this process may use: its CPU affinity (``os.cpu_count()`` where the platform
    has none), capped by the cgroup quota (:func:`cgroup_cpu_limit`) rounded down; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cores = min(cores, math.floor(limit))
    return max(1, cores)


def _positive(where: str, value: Any, allowed: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{where}={value!r} is not allowed; {allowed}")
    return int(text)


def resolve_threads(value: Any = None, environ: Mapping[str, str] | None = None) -> int:
    """The thread count of a run (module docstring): ``value`` (the ``threads`` key; None or
    ``auto``: not given), else ``OMP_NUM_THREADS`` from ``environ`` (default ``os.environ``),
    else :func:`usable_cores`. A value that is not a positive integer raises
    :class:`~solo_bayesncl.core.validation.ConfigError` naming where it came from."""
    environ = os.environ if environ is None else environ
    if value is not None and str(value).strip().lower() != "auto":
        return _positive(
            KEY,
            value,
            "give a positive number of threads, or auto (the cores this process may use)",
        )
    given = environ.get("OMP_NUM_THREADS", "").strip()
    if given:
        return _positive(
            "OMP_NUM_THREADS",
            given,
            f"set it to one positive integer, or unset it and give {KEY}=N (or --threads N)",
        )
    return usable_cores()


def resumed_threads(requested: int, recorded: Any) -> tuple[int, str | None]:
    """The count a resumed run trains on, and the line that says so when it is not
    ``requested``: the ``recorded`` count of its checkpoint (None: a checkpoint that recorded
    none, which keeps ``requested``)."""
    if recorded is None:
        return requested, None
    recorded = int(recorded)
    if recorded == requested:
        return requested, None
    return recorded, (
        f"{KEY}={requested}: this run resumes on the {recorded} thread"
        f"{'s' * (recorded != 1)} it trained with (its checkpoint's), so that it computes what "
        "the uninterrupted run would"
    )


def apply_threads(count: int) -> None:
    """Gives torch ``count`` intra-op threads, and the processes this one starts afterwards
    ``OMP_NUM_THREADS=count`` (a multi-process job's other processes resolve the same count)."""
    torch.set_num_threads(count)
    os.environ["OMP_NUM_THREADS"] = str(count)

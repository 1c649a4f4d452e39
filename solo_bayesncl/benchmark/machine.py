"""What a benchmark figure depends on besides the code: the commit it ran at, its CPU time beside
its wall time, and the 1-minute load average while it ran, so the table can mark wall times
taken on a busy machine (:func:`load_unreliable`)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["StageMeter", "cpu_seconds", "git_state", "load_unreliable"]

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]

NOT_RUN_BY_A_BENCHMARK: tuple[str, ...] = ("results/", "records/", "*/records/*", "docs/", "*.md")
"""Git pathspecs whose changes do not make a result's commit dirty: ``results/``, kept ``records/``
(a run after another would count the first one's tables as uncommitted code) and the docs."""


def git_state(folder: Path = _PACKAGE_ROOT) -> dict[str, Any]:
    """``{"commit": full hash, "dirty": bool}`` of the checkout holding the package, ``"unknown"``
    for both outside one. Dirty: a changed tracked file outside :data:`NOT_RUN_BY_A_BENCHMARK`."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, timeout=20
        )

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return {"commit": "unknown", "dirty": "unknown"}
        excluded = [f":(exclude){pattern}" for pattern in NOT_RUN_BY_A_BENCHMARK]
        status = git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
        dirty: bool | str = bool(status.stdout.strip()) if status.returncode == 0 else "unknown"
        return {"commit": head.stdout.strip(), "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": "unknown"}


def cpu_seconds() -> float:
    """User + system time of this process and of its children that have ended (data workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _own_runnable_threads() -> int | None:
    """Runnable threads of this process and its children (Linux ``/proc``); None elsewhere."""
    proc = Path("/proc")
    if not (proc / "self" / "task").is_dir():
        return None
    me = os.getpid()
    pids = [me]
    try:
        for entry in proc.iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                    pids.append(int(entry.name))
        running = 0
        for pid in pids:
            for task in (proc / str(pid) / "task").glob("*/stat"):
                try:
                    state = task.read_text().rsplit(")", 1)[1].split()[0]
                except OSError:
                    continue
                running += state == "R"
        return max(running - 1, 0)  # not counting the sampling thread itself
    except OSError:
        return None


class StageMeter:
    """Measures one stage (``with StageMeter() as meter: ...``, ``meter.result()``): wall and CPU
    time and every ``interval`` seconds the load and this process tree's runnable threads, also
    appended to ``samples_file`` (so a resumed stage's load covers every sitting)."""

    def __init__(self, interval: float = 2.0, samples_file: Path | None = None) -> None:
        self.interval = interval
        self.samples_file = samples_file
        self._loads: list[float] = []
        self._own: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wall = self._cpu = 0.0

    def _sample(self) -> None:
        try:
            self._loads.append(os.getloadavg()[0])
        except OSError:  # not available on this platform
            return
        own = _own_runnable_threads()
        if own is not None:
            self._own.append(own)
        if self.samples_file is not None:
            with open(self.samples_file, "a") as f:
                f.write(json.dumps({"load": self._loads[-1], "own_threads": own}) + "\n")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> StageMeter:
        self._wall, self._cpu = time.perf_counter(), cpu_seconds()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="load-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._wall = time.perf_counter() - self._wall
        self._cpu = cpu_seconds() - self._cpu

    def result(self) -> dict[str, Any]:
        """``wall_s``, ``cpu_s``, ``cpu_count``, ``load_mean``/``load_max`` (1-minute load
        average) and ``own_threads_mean`` (this run's runnable threads, None if unknown)."""
        if self.samples_file is not None and self.samples_file.is_file():
            samples = []
            for line in self.samples_file.read_text().splitlines():
                try:
                    samples.append(json.loads(line))
                except ValueError:  # a line being written by a running sampler
                    continue
            self._loads = [x["load"] for x in samples]
            self._own = [x["own_threads"] for x in samples if x["own_threads"] is not None]
        n = len(self._loads)
        return {
            "wall_s": self._wall,
            "cpu_s": self._cpu,
            "cpu_count": os.cpu_count(),
            "load_mean": sum(self._loads) / n if n else None,
            "load_max": max(self._loads) if n else None,
            "own_threads_mean": sum(self._own) / len(self._own) if self._own else None,
            "load_samples": n,
        }


def load_unreliable(timing: dict[str, Any], slack: float = 0.5) -> bool:
    """True when other work competed for the cores: the mean load minus the run's own runnable
    threads (or its own use) exceeds the cores the run left free by more than ``slack``."""
    load, wall, cores = timing.get("load_mean"), timing.get("wall_s"), timing.get("cpu_count")
    if load is None or not wall or not cores:
        return False
    own_use = min(timing.get("cpu_s", 0.0) / wall, cores)
    own_load = timing.get("own_threads_mean")
    foreign = load - (own_use if own_load is None else own_load)
    return foreign > cores - own_use + slack

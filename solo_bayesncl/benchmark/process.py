"""The life of a run process: its exit statuses, and its end when the benchmark process that
started it ends (Ctrl-C, SIGTERM or SIGKILL of the parent)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "EXIT_UNFINISHED",
    "PARENT_ENV",
    "Terminated",
    "handle_sigterm",
    "watch_parent",
]

#: Environment variable holding the pid of the benchmark process that started this run.
PARENT_ENV = "SOLO_BAYESNCL_BENCHMARK_PARENT"
EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_UNFINISHED = 130, 143, 3


class Terminated(BaseException):
    """Raised by the SIGTERM handler (a BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` swallows it)."""


def watch_parent() -> None:
    """Ends this run when the benchmark process that started it ends, even by SIGKILL: the
    kernel sends SIGTERM on the parent's death (``prctl(PR_SET_PDEATHSIG)`` on Linux) and a
    thread checks the parent pid every second elsewhere (and as a second line on Linux)."""
    expected = os.environ.get(PARENT_ENV)
    if not expected:
        return  # started by hand
    expected_pid = int(expected)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass

    def check() -> bool:
        if os.getppid() != expected_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            return False
        return True

    if not check():
        return

    def loop() -> None:
        while check():
            time.sleep(1.0)

    threading.Thread(target=loop, name="parent-watchdog", daemon=True).start()


_terminating = threading.Event()


def _terminate(signum, frame) -> None:
    """SIGTERM: stop once (the parent's death may signal twice: the kernel and the watchdog)."""
    if not _terminating.is_set():
        _terminating.set()
        raise Terminated


def handle_sigterm() -> None:
    """SIGTERM raises :class:`Terminated` in the main thread (once)."""
    signal.signal(signal.SIGTERM, _terminate)

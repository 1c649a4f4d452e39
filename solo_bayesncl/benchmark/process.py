"""The life of a run process, from both ends.

Each run is a child process (:mod:`.run_one`) in its own process group, so a Ctrl-C reaches the
benchmark only, which forwards it (:func:`train_in_child`); the run ends when the benchmark
does (:func:`watch_parent`). A run being trained is locked (:func:`run_lock`), so a second
benchmark on the same folder gets :class:`RunBusy`.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from solo_bayesncl.benchmark.presets import RunOrder
from solo_bayesncl.benchmark.progress import read_status
from solo_bayesncl.io.files import LockedError, hold_lock

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "EXIT_UNFINISHED",
    "PARENT_ENV",
    "Interrupted",
    "RunBusy",
    "RunFailed",
    "RunLockError",
    "Terminated",
    "handle_sigterm",
    "run_lock",
    "train_in_child",
    "watch_parent",
]

#: Environment variable holding the pid of the benchmark process that started this run.
PARENT_ENV = "SOLO_BAYESNCL_BENCHMARK_PARENT"
EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_UNFINISHED = 130, 143, 3
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    """The benchmark was stopped by a signal; finished stages are kept, nothing else is."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class RunFailed(RuntimeError):
    """A run ended with an error; the message names its log."""


class RunBusy(RuntimeError):
    """Another live benchmark process is training this run; ``holder`` says which."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class RunLockError(RuntimeError):
    """A run's lock cannot be taken; the message names it and what to do."""


class Terminated(BaseException):
    """Raised by the SIGTERM handler (a BaseException, so no ``except Exception`` swallows it)."""


def watch_parent() -> None:
    """Ends this run when the benchmark process that started it ends, even by SIGKILL."""
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


# the benchmark's end: a run started, signalled and watched as a child process


def _last_error_line(log_file: Path) -> str | None:
    """The last line of a run's log that names an error (the exception a traceback ends with)."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        text = line.strip()
        if text and ("Error" in text or "error:" in text or "Exception" in text):
            return text
    return None


def _run_child(spec_file: Path, log_file: Path, status_file: Path, display) -> int:
    """Runs ``run_one`` on ``spec_file``; forwards signals; returns its exit status."""
    received: list[int] = []
    child: subprocess.Popen | None = None

    def forward(signum, frame) -> None:
        received.append(signum)
        if child is None:
            return
        try:
            if len(received) == 1:
                child.send_signal(signum)
            else:  # asked twice: stop now
                os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # signal handlers can only be set from the main thread; elsewhere signals keep their default
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in _FORWARDED} if main_thread else {}
    env = {**os.environ, PARENT_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1"}
    try:
        with open(log_file, "a") as log:
            log.write(f"\n==== {dt.datetime.now().isoformat(timespec='seconds')} ====\n")
            log.flush()
            child = subprocess.Popen(
                [sys.executable, "-m", "solo_bayesncl.benchmark.run_one", str(spec_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C reaches the benchmark only
                env=env,
            )
            if received:  # a signal came while the child was being started
                child.send_signal(received[0])
            while True:
                try:
                    code = child.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if display is not None:
                        display.update(read_status(status_file))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if child is not None:
            # data-loader workers the run may have left behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
    if received:
        raise Interrupted(received[0])
    if code in (130, -signal.SIGINT):
        raise Interrupted(signal.SIGINT)
    if code in (143, -signal.SIGTERM):
        raise Interrupted(signal.SIGTERM)
    return code


@contextlib.contextmanager
def run_lock(run_dir: Path, label: str):
    """Holds ``run_dir/lock`` while the run (``label``) trains; :class:`RunBusy` when another live
    benchmark holds it, :class:`RunLockError` when it cannot be taken otherwise."""
    lock = run_dir / "lock"
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(hold_lock(lock))
        except LockedError as err:
            who = f"process {err.pid}" if err.pid is not None else "another process"
            raise RunBusy(
                f"{label} is being trained by another benchmark ({who}, lock "
                f"{err.path}); wait for it to end, then run this command again: it skips the "
                "finished runs (or pass --leave-busy to train the other runs meanwhile)",
                holder=f"{who}, lock {err.path}",
            ) from None
        except IsADirectoryError:
            raise RunLockError(
                f"{label}: its lock {lock} is a folder, not a lock file; remove it (nothing of "
                "the run is in it) and run the same command again"
            ) from None
        except OSError as err:
            raise RunLockError(
                f"{label}: cannot take its lock {lock} ({err.strerror or err}); make the run "
                "folder writable and run the same command again"
            ) from None
        yield


def train_in_child(order: RunOrder, run_dir: Path, display, run_progress, log) -> None:
    """Trains one unfinished run, ``order``, in its child process, shown on ``display``;
    :class:`RunFailed` with the error its log ends with."""
    label = f"{order.variant} seed {order.seed}"
    result_file = run_dir / "result.json"
    (run_dir / "spec.json").write_text(order.to_json())
    (run_dir / "status.json").unlink(missing_ok=True)  # an earlier sitting's
    log(f"[run]  {label}: log {run_dir / 'log.txt'}")
    if display is not None:
        display.start_run(label, run_progress)
    code = _run_child(run_dir / "spec.json", run_dir / "log.txt", run_dir / "status.json", display)
    if code != 0 or not result_file.is_file():
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code < 0 and -code in signal.valid_signals()
            else f"exit {code}"
        )
        cause = _last_error_line(run_dir / "log.txt")
        raise RunFailed(
            f"{label} failed ({how}"
            + (f": {cause}" if cause else "")
            + f"); see {run_dir / 'log.txt'}; finished stages are kept: run the same command "
            "again to resume"
        )
    if display is not None:
        display.finish_run()

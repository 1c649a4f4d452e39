"""Wall and CPU time of the README's quick start under each thread setting, on idle cores and
beside one busy process per core.

A run trains on the thread count it resolves once, never on the load (:mod:`solo_bayesncl.core.
threads`: the ``threads`` key, else ``OMP_NUM_THREADS``, else the cores this process may use), so
the count is the same idle and loaded and so are the weights; this script measures what that
costs beside busy cores, against torch's own default count and against fewer threads.

One run is the quick start, ``python main_pretrain.py`` with ``data.dataset=fashion-mnist
data.fraction=0.05 data.val_fraction=0.1 max_epochs=2 optimizer.batch_size=128
data.num_workers=2 interpretability.enabled=True`` (``--fraction`` and ``--epochs`` change two of
them) and ``accelerator=cpu``, started as a new process in a fresh temporary folder that is its
``checkpoint.dir`` (removed afterwards). Its environment is this one's without the variables that
set threads (:data:`CONTROLLED`), plus the policy's (``--policies``):

- ``project``: the run's own default, nothing set;
- ``torch``: ``threads=N`` with N torch's own default count (``torch.get_num_threads()`` in a
  fresh interpreter with this environment), the count torch would take if no one set it;
- ``threads=N``: the run's ``threads`` key, e.g. ``threads=1`` on a shared machine;
- ``VAR=VALUE[,VAR=VALUE]``: these variables, e.g. ``OMP_NUM_THREADS=1`` (taken as the count),
  ``OMP_WAIT_POLICY=PASSIVE`` or ``GOMP_SPINCOUNT=10000`` (libgomp, torch's runtime on Linux: how
  idle threads wait, which the runs never set themselves).

Before timing, each policy's thread count and variables are printed. Conditions: ``idle``, and
``loaded``: ``--load`` processes (default one per logical CPU) each running a pure-Python busy
loop, started before the run and stopped after it (also on Ctrl-C, SIGTERM or an error; each also
ends by itself once this script's process is gone). Each round runs every policy idle and loaded,
policies in an order rotating each round, which condition comes first alternating. Times: the
run's wall time, and its CPU time with that of the processes it waited for (loader workers) from
``os.wait4``; besides, the CPU time the rest of the machine used during each run (``/proc/stat``
less the run's and the busy loops'), which should be near zero on a quiet machine. Reported:
medians per policy and condition, and paired per-round ratios: loaded/idle per policy,
policy/torch per condition, with a verdict against the goals (loaded at most 2.5x idle, fair
share being 2x; idle at most 3% slower than torch's).

Usage::

    python microbenchmarks/bench_threads.py [--repeats 3] [--fraction 0.05] [--epochs 2]
        [--load N] [--policies torch project threads=1 OMP_WAIT_POLICY=PASSIVE]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTROLLED = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "KMP_BLOCKTIME",
)
"""Removed from every run's environment; each policy sets its own."""
DEFAULT_POLICIES = ("torch", "project", "threads=1")
CONDITIONS = ("idle", "loaded")
MAX_LOADED_OVER_IDLE = 2.5
MAX_IDLE_OVER_TORCH = 1.03
BUSY_LOOP = (
    "import os, sys\nparent = int(sys.argv[1])\n"
    "while os.getppid() == parent:\n    for _ in range(1_000_000):\n        pass\n"
)
"""One core's worth of pure-Python work that ends once the process that started it is gone."""
PROBE = (
    "import os, sys\n"
    "from solo_bayesncl.core.threads import resolve_threads\n"
    "given = [a.split('=', 1)[1] for a in sys.argv[1:] if a.startswith('threads=')]\n"
    "print(f'threads={resolve_threads(given[0] if given else None)}', "
    "*(f'{k}={os.environ[k]}' for k in sys.argv[1:] if k in os.environ))\n"
)
"""Prints the thread count a run resolves, and the variables of ``sys.argv`` it has."""
_SPEC = re.compile(r"[A-Z_][A-Z0-9_]*=[^,=]+")
_THREADS = re.compile(r"threads=[1-9][0-9]*")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CONTROLLED}


@functools.cache
def torch_default_threads() -> int:
    """torch's own intra-op thread count in a fresh interpreter, no thread variable set."""
    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def policy_run(policy: str) -> tuple[dict[str, str], list[str]]:
    """A run's environment and extra overrides under ``policy`` (the module docstring's forms)."""
    env = _clean_env()
    if policy == "project":
        return env, []
    if policy == "torch":
        return env, [f"threads={torch_default_threads()}"]
    if _THREADS.fullmatch(policy):
        return env, [policy]
    env.update(item.split("=", 1) for item in policy.split(","))
    return env, []


def effective_settings(policy: str) -> str:
    """The thread count a run under ``policy`` trains on, and the thread variables it has."""
    env, overrides = policy_run(policy)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *overrides, *CONTROLLED],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``), or None."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def process_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (``/proc/PID/stat``), 0 if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def busy_cores(count: int) -> Iterator[list[subprocess.Popen]]:
    """``count`` busy-loop processes for the duration of the block, always stopped after it."""
    loops: list[subprocess.Popen] = []
    try:
        for _ in range(count):
            loops.append(
                subprocess.Popen(
                    [sys.executable, "-I", "-c", BUSY_LOOP, str(os.getpid())],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # a Ctrl-C is this script's to handle
                )
            )
        yield loops
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def quick_start(args: argparse.Namespace, folder: Path) -> list[str]:
    """The quick start's command line, writing into ``folder``."""
    return [
        sys.executable,
        str(REPO / "main_pretrain.py"),
        "data.dataset=fashion-mnist",
        f"data.fraction={args.fraction}",
        "data.val_fraction=0.1",
        f"max_epochs={args.epochs}",
        "optimizer.batch_size=128",
        "data.num_workers=2",
        "interpretability.enabled=True",
        "accelerator=cpu",
        f"checkpoint.dir={folder / 'trained_models'}",
    ]


def timed_run(args: argparse.Namespace, policy: str, loaded: bool) -> tuple[float, float, float]:
    """One quick start under ``policy``: its wall seconds, its CPU seconds (with the processes
    it waited for) and the CPU seconds the rest of the machine used meanwhile."""
    with (
        tempfile.TemporaryDirectory(prefix="bench_threads-") as tmp,
        busy_cores(args.load if loaded else 0) as loops,
    ):
        folder = Path(tmp)
        loops_before = sum(process_seconds(loop.pid) for loop in loops)
        machine_before, start = busy_seconds(), time.perf_counter()
        with (folder / "run.log").open("w") as log:
            env, overrides = policy_run(policy)
            proc = subprocess.Popen(
                [*quick_start(args, folder), *overrides],
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # stopped with its loader workers below if this one stops
            )
            try:
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
            finally:
                if proc.returncode is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        wall = time.perf_counter() - start
        machine_after = busy_seconds()
        loops_cpu = sum(process_seconds(loop.pid) for loop in loops) - loops_before
        if proc.returncode != 0:
            tail = (folder / "run.log").read_text(errors="replace").splitlines()[-15:]
            raise SystemExit(
                f"the quick start under {policy} ({'loaded' if loaded else 'idle'}) ended with "
                f"status {proc.returncode}:\n" + "\n".join(tail)
            )
    cpu = usage.ru_utime + usage.ru_stime
    others = float("nan")
    if machine_before is not None and machine_after is not None:
        others = max(0.0, machine_after - machine_before - cpu - loops_cpu)
    return wall, cpu, others


def paired(numerators: list[float], denominators: list[float]) -> float:
    """Median over rounds of the per-round ratio."""
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))


Times = dict[tuple[str, str], dict[str, list[float]]]  # (policy, condition) -> clock -> per round


def run(args: argparse.Namespace) -> None:
    print(
        f"torch {version('torch')}, {os.cpu_count()} logical CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at start; {args.repeats} rounds, loaded = {args.load} busy "
        f"loops; quick start at data.fraction={args.fraction}, max_epochs={args.epochs}"
    )
    for policy in args.policies:
        print(f"  {policy:<24} runs with: {effective_settings(policy)}")
    times: Times = {
        (p, c): {"wall": [], "cpu": [], "others": []} for p in args.policies for c in CONDITIONS
    }
    policies = list(args.policies)
    for r in range(args.repeats):
        order = policies[r % len(policies) :] + policies[: r % len(policies)]
        for policy in order:
            for condition in CONDITIONS if r % 2 == 0 else CONDITIONS[::-1]:
                wall, cpu, others = timed_run(args, policy, condition == "loaded")
                for clock, value in (("wall", wall), ("cpu", cpu), ("others", others)):
                    times[policy, condition][clock].append(value)
                print(
                    f"  round {r + 1} {policy:<24} {condition:<6} wall {wall:7.1f} s  "
                    f"CPU {cpu:7.1f} s  others' CPU {others:5.1f} s",
                    flush=True,
                )
    report(args, times)


def report(args: argparse.Namespace, times: Times) -> None:
    width = max(24, *(len(p) for p in args.policies))
    print(
        f"\n{'policy':<{width}} {'condition':<9} {'wall s':>8} {'CPU s':>8} {'CPU/wall':>8} "
        f"{'others CPU s':>12}"
    )
    for (policy, condition), t in times.items():
        wall, cpu = statistics.median(t["wall"]), statistics.median(t["cpu"])
        print(
            f"{policy:<{width}} {condition:<9} {wall:8.1f} {cpu:8.1f} {cpu / wall:8.2f} "
            f"{statistics.median(t['others']):12.1f}"
        )
    print("\nmedians over rounds; ratios below: median over rounds of the per-round ratio")
    print(f"\n{'policy':<{width}} {'loaded/idle':>11} {'idle/torch':>10} {'loaded/torch':>12}")
    for policy in args.policies:
        idle, loaded = times[policy, "idle"]["wall"], times[policy, "loaded"]["wall"]
        line = f"{policy:<{width}} {paired(loaded, idle):10.2f}x"
        if "torch" in args.policies and policy != "torch":
            line += f" {paired(idle, times['torch', 'idle']['wall']):9.3f}x"
            line += f" {paired(loaded, times['torch', 'loaded']['wall']):11.3f}x"
        print(line)
    print(
        f"\ngoals: loaded/idle <= {MAX_LOADED_OVER_IDLE}x (fair share: 2x on busy cores shared "
        f"with one busy loop each), idle/torch <= {MAX_IDLE_OVER_TORCH}x (wall time)"
    )
    for policy in args.policies:
        idle, loaded = times[policy, "idle"]["wall"], times[policy, "loaded"]["wall"]
        shared = paired(loaded, idle) <= MAX_LOADED_OVER_IDLE
        verdicts = [f"loaded/idle {'meets' if shared else 'misses'}"]
        if "torch" in args.policies and policy != "torch":
            kept = paired(idle, times["torch", "idle"]["wall"]) <= MAX_IDLE_OVER_TORCH
            verdicts.append(f"idle/torch {'meets' if kept else 'misses'}")
        print(f"  {policy}: {', '.join(verdicts)}")
    others = [v for t in times.values() for v in t["others"] if v == v]
    if others and max(others) > 0.05 * min(statistics.median(t["wall"]) for t in times.values()):
        print(
            f"other processes used up to {max(others):.1f} CPU s during a run: the machine was "
            "not quiet, so the conditions were not what they say; rerun on a quiet machine"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every policy x condition")
    parser.add_argument("--fraction", type=float, default=0.05, help="the run's data.fraction")
    parser.add_argument("--epochs", type=int, default=2, help="the run's max_epochs")
    parser.add_argument(
        "--load", type=int, default=os.cpu_count() or 1, help="busy loops when loaded"
    )
    parser.add_argument(
        "--policies",
        nargs="+",
        default=list(DEFAULT_POLICIES),
        help="project (the run's default), torch (torch's default count), threads=N, or "
        "VAR=VALUE[,VAR=VALUE]",
    )
    args = parser.parse_args(argv)
    for key in ("repeats", "epochs", "load"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be >= 1, got {getattr(args, key)}")
    if not 0 < args.fraction <= 1:
        parser.error(f"--fraction must be in (0, 1], got {args.fraction}")
    for policy in args.policies:
        if (
            policy not in ("torch", "project")
            and not _THREADS.fullmatch(policy)
            and not all(_SPEC.fullmatch(item) for item in policy.split(","))
        ):
            parser.error(
                f"--policies: {policy!r} is not one of torch, project, threads=N, "
                "VAR=VALUE[,VAR=VALUE]"
            )
    if len(set(args.policies)) != len(args.policies):
        parser.error("--policies: each policy once")
    return args


def _stop(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)  # the busy loops and the run are stopped on the way out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    try:
        run(args)
    except KeyboardInterrupt:
        print("interrupted: the busy loops and the run under way were stopped", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()

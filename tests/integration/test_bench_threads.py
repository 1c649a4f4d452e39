"""``microbenchmarks/bench_threads.py``: each policy's run gets the thread count and variables it
names whatever this environment holds, the project's count does not change beside busy cores, the
busy loops of the loaded condition always stop, and bad arguments are refused naming the option.
(The timed runs themselves are not run here.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO

from solo_bayesncl.core.threads import usable_cores

sys.path.insert(0, str(REPO / "microbenchmarks"))
import bench_threads  # noqa: E402


@pytest.fixture
def users_settings(monkeypatch):
    """An environment in which the user set every thread variable: no policy may inherit them."""
    for name in bench_threads.CONTROLLED:
        monkeypatch.setenv(name, "7" if name.endswith(("THREADS", "SPINCOUNT")) else "ACTIVE")
    monkeypatch.setenv("PYTHONPATH", str(REPO))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("project", f"threads={usable_cores()}"),
        ("threads=1", "threads=1"),
        ("OMP_NUM_THREADS=1", "threads=1 OMP_NUM_THREADS=1"),
        (
            "GOMP_SPINCOUNT=10000,OMP_WAIT_POLICY=PASSIVE",
            f"threads={usable_cores()} OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000",
        ),
    ],
)
def test_a_run_has_the_policys_settings_and_none_it_would_inherit(users_settings, policy, expected):
    assert bench_threads.effective_settings(policy) == expected


def test_the_torch_policy_gives_torchs_own_count(users_settings):
    count = bench_threads.torch_default_threads()
    assert count >= 1
    assert bench_threads.effective_settings("torch") == f"threads={count}"


def test_the_project_count_is_the_same_beside_busy_cores(users_settings):
    idle = bench_threads.effective_settings("project")
    with bench_threads.busy_cores(os.cpu_count() or 1):
        assert bench_threads.effective_settings("project") == idle


def test_the_busy_loops_run_in_the_block_and_stop_after_it_even_on_an_error():
    with pytest.raises(RuntimeError), bench_threads.busy_cores(2) as loops:
        assert [loop.poll() for loop in loops] == [None, None]
        raise RuntimeError("the run failed")
    assert all(loop.returncode is not None for loop in loops)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeats", "0"], "--repeats must be >= 1, got 0"),
        (["--fraction", "0"], "--fraction must be in (0, 1], got 0.0"),
        (["--policies", "passive"], "'passive' is not one of torch, project, threads=N, VAR="),
        (["--policies", "threads=0"], "'threads=0' is not one of torch, project, threads=N"),
        (["--policies", "torch", "torch"], "--policies: each policy once"),
    ],
)
def test_bad_arguments_are_refused_naming_the_option(args, message):
    done = subprocess.run(
        [sys.executable, str(REPO / "microbenchmarks" / "bench_threads.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert done.returncode == 2
    assert message in done.stderr.strip().splitlines()[-1]

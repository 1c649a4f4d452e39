"""``import solo_bayesncl``, before torch loads, gives torch the cores other processes leave and
passive threads when at least half a core is busy, and sets nothing on idle cores, when the user
chose, opted out, or torch is already loaded; the processes it starts inherit it. The cases about
import order run in fresh interpreters."""

from __future__ import annotations

import ast
import contextlib
import os
import subprocess
import sys
import time

import pytest
from helpers import REPO

from solo_bayesncl.core import threads
from solo_bayesncl.core.threads import KEEP_DEFAULTS_ENV, apply_thread_policy

PRINT_POLICY = (
    "import os; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OMP_NUM_THREADS'))"
)
LOADED = ["PASSIVE", "1"]


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the thread settings (this process imported the package,
    which set one), the checkout first on the path, and ``extra``."""
    dropped = {*threads.USER_SETTINGS, KEEP_DEFAULTS_ENV}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**env, **extra}


def _python(code: str, **extra: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=_clean_env(**extra),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(
    ("env", "torch_loaded", "busy", "expected"),
    [
        ({}, False, 2.0, {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}),
        ({}, False, 3.6, {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}),
        ({}, False, 0.4, {}),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, False, 4.0, {}),
        ({"OMP_NUM_THREADS": "3"}, False, 4.0, {}),
        ({"GOMP_SPINCOUNT": "10000"}, False, 4.0, {}),
        ({KEEP_DEFAULTS_ENV: " Yes "}, False, 4.0, {}),
        (
            {KEEP_DEFAULTS_ENV: "0"},
            False,
            1.0,
            {"OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "PASSIVE"},
        ),
        ({}, True, 4.0, {}),
    ],
)
def test_the_policy_is_set_only_beside_busy_cores_when_unset_and_before_torch(
    monkeypatch, env, torch_loaded, busy, expected
):
    for name in (*threads.USER_SETTINGS, KEEP_DEFAULTS_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if torch_loaded:
        monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))
    else:
        monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(threads, "busy_cores", lambda: busy)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert apply_thread_policy() == expected
    for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY"):
        assert os.environ.get(name) == expected.get(name, env.get(name))


def test_busy_cores_counts_a_busy_process_and_reads_nothing_off_linux(monkeypatch):
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert threads.busy_cores(0.3) >= 0.5
    finally:
        loop.kill()
        loop.wait()

    def no_proc_stat():
        raise FileNotFoundError("/proc/stat")

    monkeypatch.setattr(threads, "_ticks", no_proc_stat)
    assert threads.busy_cores() == 0.0


@contextlib.contextmanager
def _every_core_busy():
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        time.sleep(0.3)
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_beside_busy_cores_the_package_sets_the_policy_and_its_processes_inherit_it():
    code = (
        f"import solo_bayesncl, subprocess, sys; {PRINT_POLICY}; "
        f"subprocess.run([sys.executable, '-c', {PRINT_POLICY!r}], check=True)"
    )
    with _every_core_busy():
        assert _python(code) == LOADED + LOADED


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"OMP_WAIT_POLICY": "ACTIVE"}, ["ACTIVE", "None"]),
        ({"OMP_NUM_THREADS": "2"}, ["None", "2"]),
        ({KEEP_DEFAULTS_ENV: "1"}, ["None", "None"]),
    ],
)
def test_a_users_choice_or_opt_out_is_kept(extra, expected):
    with _every_core_busy():
        assert _python(f"import solo_bayesncl; {PRINT_POLICY}", **extra) == expected


def test_importing_the_package_after_torch_sets_nothing():
    """torch's OpenMP runtime read the environment when torch loaded: a value set afterwards
    would claim a policy that is not in force."""
    with _every_core_busy():
        assert _python(f"import torch, solo_bayesncl; {PRINT_POLICY}") == ["None", "None"]


def test_the_thread_count_set_reaches_torch():
    code = "import solo_bayesncl, torch; print(torch.get_num_threads())"
    with _every_core_busy():
        assert _python(code) == ["1"]


@pytest.mark.parametrize("script", ["main_pretrain.py", "main_linear.py", "main_knn.py"])
def test_the_entry_scripts_import_the_package_before_anything_else(script):
    tree = ast.parse((REPO / script).read_text(encoding="utf-8"))
    first = next(n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom))
    names = [first.module] if isinstance(first, ast.ImportFrom) else [a.name for a in first.names]
    assert all(str(n).split(".")[0] == "solo_bayesncl" for n in names)

"""``import solo_bayesncl`` sets ``OMP_WAIT_POLICY=PASSIVE`` before torch loads, unless the user
chose how OpenMP threads wait, opted out, or torch is already loaded; the processes it starts
inherit it. The cases about import order run in fresh interpreters."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
from helpers import REPO

from solo_bayesncl.core import threads
from solo_bayesncl.core.threads import KEEP_DEFAULTS_ENV, apply_wait_policy

PRINT_POLICY = "import os; print(os.environ.get('OMP_WAIT_POLICY'))"


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the thread settings (this process imported the package,
    which set one), the checkout first on the path, and ``extra``."""
    dropped = {*threads.USER_SETTINGS, KEEP_DEFAULTS_ENV, "OMP_NUM_THREADS"}
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
    ("env", "torch_loaded", "sets", "expected"),
    [
        ({}, False, True, "PASSIVE"),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, False, False, "ACTIVE"),
        ({"OMP_WAIT_POLICY": ""}, False, False, ""),
        ({"GOMP_SPINCOUNT": "10000"}, False, False, None),
        ({KEEP_DEFAULTS_ENV: "1"}, False, False, None),
        ({KEEP_DEFAULTS_ENV: " Yes "}, False, False, None),
        ({KEEP_DEFAULTS_ENV: "0"}, False, True, "PASSIVE"),
        ({}, True, False, None),
    ],
)
def test_the_policy_is_set_only_when_unset_wanted_and_before_torch(
    monkeypatch, env, torch_loaded, sets, expected
):
    for name in (*threads.USER_SETTINGS, KEEP_DEFAULTS_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if torch_loaded:
        monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))
    else:
        monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert apply_wait_policy() is sets
    assert os.environ.get("OMP_WAIT_POLICY") == expected


def test_importing_the_package_sets_passive_and_the_processes_it_starts_inherit_it():
    code = (
        "import solo_bayesncl, os, subprocess, sys; print(os.environ.get('OMP_WAIT_POLICY')); "
        f"subprocess.run([sys.executable, '-c', {PRINT_POLICY!r}], check=True)"
    )
    assert _python(code) == ["PASSIVE", "PASSIVE"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
        ({"GOMP_SPINCOUNT": "1000"}, "None"),
        ({KEEP_DEFAULTS_ENV: "1"}, "None"),
    ],
)
def test_a_users_choice_or_opt_out_is_kept(extra, expected):
    assert _python(f"import solo_bayesncl; {PRINT_POLICY}", **extra) == [expected]


def test_importing_the_package_after_torch_sets_nothing():
    """torch's OpenMP runtime read the environment when torch loaded: a value set afterwards
    would claim a policy that is not in force."""
    assert _python(f"import torch, solo_bayesncl; {PRINT_POLICY}") == ["None"]


def test_a_thread_count_the_user_set_still_applies():
    """``tests/conftest.py`` runs every pytest-xdist worker, and what it starts, on one thread
    through ``OMP_NUM_THREADS``: the package leaves it alone."""
    code = f"import solo_bayesncl, torch; print(torch.get_num_threads()); {PRINT_POLICY}"
    assert _python(code, OMP_NUM_THREADS="1") == ["1", "PASSIVE"]


@pytest.mark.parametrize("script", ["main_pretrain.py", "main_linear.py", "main_knn.py"])
def test_the_entry_scripts_import_the_package_before_anything_else(script):
    tree = ast.parse((REPO / script).read_text(encoding="utf-8"))
    first = next(n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom))
    names = [first.module] if isinstance(first, ast.ImportFrom) else [a.name for a in first.names]
    assert all(str(n).split(".")[0] == "solo_bayesncl" for n in names)

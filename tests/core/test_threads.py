"""The thread count is a setting of each run (``solo_bayesncl.core.threads``), never drawn from the
load: the cores this process may use (affinity, cgroup quota) or what the user gives; importing
the package sets nothing; a run records its count and a resumed run trains on the recorded one.

The last tests train tiny pretrainings on the offline Fashion-MNIST in real processes: idle and
beside a busy loop per core they end with the same weights bit for bit, a run resumed beside busy
loops ends with the uninterrupted run's weights, and a process limited to one core trains on one
thread."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import FASHION_MNIST, REPO

from solo_bayesncl.core.threads import (
    CHECKPOINT_KEY,
    cgroup_cpu_limit,
    resolve_threads,
    resumed_threads,
    usable_cores,
)
from solo_bayesncl.core.validation import ConfigError


def _fake_root(tmp_path: Path, cgroup: str, files: dict[str, str]) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for name, text in files.items():
        path = tmp_path / "sys/fs/cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("cgroup", "files", "expected"),
    [
        # cgroup v2: the process's folder and its parents, the smallest quota
        ("0::/job/step\n", {"job/step/cpu.max": "150000 100000\n"}, 1.5),
        ("0::/job/step\n", {"job/step/cpu.max": "max 100000", "job/cpu.max": "300000 100000"}, 3.0),
        ("0::/job\n", {"job/cpu.max": "max 100000", "cpu.max": "max 100000"}, None),
        # a container sees its own cgroup as the root: the path named is not there
        ("0::/../outside\n", {"cpu.max": "200000 100000"}, 2.0),
        # cgroup v1: the cpu controller's quota over its period; -1 is no quota
        (
            "4:cpu,cpuacct:/slurm/job\n1:memory:/x\n",
            {
                "cpu,cpuacct/slurm/job/cpu.cfs_quota_us": "250000",
                "cpu,cpuacct/slurm/job/cpu.cfs_period_us": "100000",
            },
            2.5,
        ),
        (
            "3:cpu:/\n",
            {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"},
            None,
        ),
        ("0::/\n", {"cpu.max": "garbage"}, None),
        ("", {}, None),
    ],
)
def test_the_cgroup_quota_is_read_from_v2_and_v1_files(tmp_path, cgroup, files, expected):
    assert cgroup_cpu_limit(_fake_root(tmp_path, cgroup, files)) == expected


@pytest.mark.parametrize(
    ("quota", "affinity", "expected"),
    [("150000", 4, 1), ("50000", 4, 1), ("800000", 4, 4), ("-1", 3, 3)],
)
def test_usable_cores_is_the_affinity_capped_by_the_quota_rounded_down(
    tmp_path, monkeypatch, quota, affinity, expected
):
    root = _fake_root(
        tmp_path,
        "2:cpu:/\n",
        {"cpu/cpu.cfs_quota_us": quota, "cpu/cpu.cfs_period_us": "100000"},
    )
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    assert usable_cores(root) == expected


@pytest.mark.parametrize(
    ("value", "environ", "expected"),
    [
        (3, {"OMP_NUM_THREADS": "2"}, 3),  # the key wins
        ("4", {}, 4),
        (None, {"OMP_NUM_THREADS": " 2 "}, 2),  # the user's variable, when the key is left out
        ("auto", {"OMP_NUM_THREADS": "5"}, 5),
        (None, {}, "cores"),
        ("AUTO", {"OMP_NUM_THREADS": ""}, "cores"),
    ],
)
def test_the_count_is_the_key_else_omp_num_threads_else_the_usable_cores(value, environ, expected):
    wanted = usable_cores() if expected == "cores" else expected
    assert resolve_threads(value, environ) == wanted


@pytest.mark.parametrize(
    ("value", "environ", "message"),
    [
        (0, {}, "threads=0 is not allowed; give a positive number of threads, or auto"),
        ("two", {}, "threads='two' is not allowed"),
        (True, {}, "threads=True is not allowed"),
        (
            None,
            {"OMP_NUM_THREADS": "4,2"},
            "OMP_NUM_THREADS='4,2' is not allowed; set it to one "
            "positive integer, or unset it and give threads=N (or --threads N)",
        ),
        (None, {"OMP_NUM_THREADS": "0"}, "OMP_NUM_THREADS='0' is not allowed"),
    ],
)
def test_a_bad_count_is_refused_naming_where_it_came_from(value, environ, message):
    with pytest.raises(ConfigError) as err:
        resolve_threads(value, environ)
    assert str(err.value).startswith(message)


def test_a_resumed_run_keeps_its_recorded_count_and_says_so_when_another_is_asked():
    assert resumed_threads(2, None) == (2, None)  # a checkpoint that recorded none
    assert resumed_threads(2, 2) == (2, None)
    count, line = resumed_threads(1, 2)
    assert count == 2
    assert line is not None and line.startswith("threads=1: this run resumes on the 2 threads")


def test_a_config_reads_auto_as_not_yet_resolved_and_pretraining_resolves_it(monkeypatch):
    from helpers import compose

    from solo_bayesncl.config.settings import run_spec

    overrides = ["data.dataset=fashion-mnist", "accelerator=cpu", "devices=1"]
    composed = compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides)
    assert composed.threads == "auto" and run_spec(composed).trainer.threads is None
    given = compose("scripts/pretrain/cifar", "bayesncl.yaml", [*overrides, "threads=3"])
    assert run_spec(given).trainer.threads == 3


@pytest.mark.solo
def test_pretraining_resolves_auto_to_the_usable_cores_and_omp_num_threads(monkeypatch):
    from helpers import compose

    from solo_bayesncl.training.pretrain import prepare_pretrain

    overrides = ["data.dataset=fashion-mnist", "accelerator=cpu", "devices=1"]
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides)
    spec = prepare_pretrain(cfg, check_data=False)
    assert spec.trainer.threads == spec.solo.threads == usable_cores()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides)
    assert prepare_pretrain(cfg, check_data=False).trainer.threads == 3


def test_importing_the_package_changes_no_environment_variable_even_beside_busy_cores():
    code = (
        "import json, os; before = dict(os.environ); import solo_bayesncl, torch; "
        "print(json.dumps([{k: v for k, v in os.environ.items() if before.get(k) != v}, "
        "sorted(set(before) - set(os.environ))]))"
    )
    with _busy_loops():
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{}, []]


# ---- tiny pretrainings in real processes ----------------------------------------------------

TINY = [
    "data.dataset=fashion-mnist",
    "data.fraction=0.01",
    "data.val_fraction=0.02",
    "optimizer.batch_size=32",
    "data.num_workers=0",
    "accelerator=cpu",
    "devices=1",
    "++limit_train_batches=3",
    "++limit_val_batches=1",
    "++num_sanity_val_steps=0",
    "method_kwargs.proj_hidden_dim=64",
    "method_kwargs.proj_output_dim=32",
    "wandb.enabled=False",
    "++enable_progress_bar=False",
    "seed=5",
]
"""Two epochs of three steps of BayesNCL (its gate draws noise at every step)."""

DRIVER = """
import json, sys
from helpers import compose
from solo_bayesncl.training.pretrain import pretrain
from lightning.pytorch import Callback

overrides, stop = json.loads(sys.argv[1]), json.loads(sys.argv[2])

class Stop(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, index):
        if stop is not None and [trainer.current_epoch, index] == stop:
            raise KeyboardInterrupt  # what Ctrl-C raises, before this step's checkpoint

class Threads(Callback):
    def on_train_start(self, trainer, pl_module):
        import torch
        print("training threads", torch.get_num_threads(), flush=True)

cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides)
trainer = pretrain(cfg, extra_callbacks=[Stop(), Threads()])
print("stopped" if trainer.interrupted else "finished", trainer.global_step, flush=True)
"""
"""A pretraining in its own process, stopped (as by Ctrl-C) at ``[epoch, batch]`` when given,
that prints the thread count torch trains on."""

needs_data = pytest.mark.skipif(
    not (FASHION_MNIST / "t10k-images-idx3-ubyte.gz").is_file(),
    reason="needs the offline Fashion-MNIST",
)


def _env(**extra: str) -> dict[str, str]:
    """This environment without the thread variables (the test runner may set them), with the
    checkout and the tests' helpers first on the path."""
    dropped = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    return {**env, **extra}


@contextlib.contextmanager
def _busy_loops():
    """One busy loop per core for the block, always stopped after it."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def _train(out: Path, extra: list[str], stop=None, preexec_fn=None) -> str:
    overrides = [*TINY, *extra, f"checkpoint.dir={out}"]
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(overrides), json.dumps(stop)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
        preexec_fn=preexec_fn,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _pretrain_command(out: Path, extra: list[str], **environ: str) -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "main_pretrain.py"), *TINY, *extra, f"checkpoint.dir={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=_env(**environ),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _last_checkpoint(out: Path) -> tuple[dict, dict]:
    """The newest epoch checkpoint of the only run under ``out`` and its ``args.json``."""
    (run,) = (out / "bayesncl").iterdir()
    ckpt = max(run.glob("*-ep=*.ckpt"), key=lambda p: (len(p.name), p.name))
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    return saved, json.loads((run / "args.json").read_text())


def _same_bits(first: dict, second: dict) -> None:
    a, b = first["state_dict"], second["state_dict"]
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ, e.g. {differ[0]}"


@pytest.mark.slow
@pytest.mark.solo
@needs_data
def test_the_same_pretraining_idle_and_beside_busy_cores_ends_with_the_same_weights(tmp_path):
    idle = _pretrain_command(tmp_path / "idle", ["max_epochs=1"])
    with _busy_loops():
        busy = _pretrain_command(tmp_path / "busy", ["max_epochs=1"])
    assert idle and busy
    first, args = _last_checkpoint(tmp_path / "idle")
    second, busy_args = _last_checkpoint(tmp_path / "busy")
    _same_bits(first, second)
    assert first[CHECKPOINT_KEY] == second[CHECKPOINT_KEY] == usable_cores()
    assert args["threads"] == busy_args["threads"] == usable_cores()
    if usable_cores() > 1:  # the comparison can fail: another count gives other weights
        _pretrain_command(tmp_path / "one", ["max_epochs=1", "threads=1"])
        one, _ = _last_checkpoint(tmp_path / "one")
        with pytest.raises(AssertionError, match="tensors differ"):
            _same_bits(first, one)


@pytest.mark.slow
@pytest.mark.solo
@needs_data
def test_how_idle_threads_wait_changes_no_weight(tmp_path):
    """``OMP_WAIT_POLICY`` (libgomp's spin-or-sleep choice, which docs/benchmark.md suggests on a
    shared machine) only decides how a waiting thread waits, never how a sum is split."""
    runs = {
        policy: _pretrain_command(tmp_path / policy, ["max_epochs=1", "threads=2"], **environ)
        for policy, environ in {
            "default": {},
            "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
            "active": {"OMP_WAIT_POLICY": "ACTIVE"},
        }.items()
    }
    assert all(runs.values())
    default, _ = _last_checkpoint(tmp_path / "default")
    for policy in ("passive", "active"):
        other, args = _last_checkpoint(tmp_path / policy)
        _same_bits(default, other)
        assert other[CHECKPOINT_KEY] == args["threads"] == 2


@pytest.mark.slow
@pytest.mark.solo
@needs_data
def test_a_run_resumed_under_another_load_and_count_ends_with_the_uninterrupted_weights(tmp_path):
    """The first sitting trains on 2 threads and is stopped within epoch 1; the second, beside a
    busy loop per core, asks for 1 thread: it resumes on the recorded 2, says so, and ends
    where the uninterrupted 2-thread run ends."""
    common = ["max_epochs=2", "threads=2", "auto_resume.enabled=True"]
    whole = _train(tmp_path / "whole", [*common, "++checkpoint.time_interval_s=0"])
    assert "training threads 2" in whole and "finished 6" in whole
    every_step = "++checkpoint.time_interval_s=0.000001"
    stopped = _train(tmp_path / "resumed", [*common, every_step], stop=[1, 1])
    assert "stopped 5" in stopped
    with _busy_loops():
        resumed = _train(
            tmp_path / "resumed",
            ["max_epochs=2", "threads=1", "auto_resume.enabled=True", every_step],
        )
    assert "resuming the same run" in resumed
    assert "threads=1: this run resumes on the 2 threads it trained with" in resumed
    assert "training threads 2" in resumed and "finished 6" in resumed
    expected, _ = _last_checkpoint(tmp_path / "whole")
    got, args = _last_checkpoint(tmp_path / "resumed")
    _same_bits(expected, got)
    assert got[CHECKPOINT_KEY] == 2 and args["threads"] == 2


@pytest.mark.slow
@pytest.mark.solo
@needs_data
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_process_limited_to_one_core_trains_on_one_thread_and_records_it(tmp_path):
    out = _train(
        tmp_path,
        ["max_epochs=1"],
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )
    assert "training threads 1" in out
    saved, args = _last_checkpoint(tmp_path)
    assert saved[CHECKPOINT_KEY] == 1 and args["threads"] == 1

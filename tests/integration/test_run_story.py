"""A run's story, told by real ``python main_pretrain.py`` processes: Ctrl-C (SIGINT) or SIGTERM
during a pretraining ends with "interrupted at epoch E, step S", the checkpoint to resume from and
the command, and exit status 130 or 143; the same command resumes into the same run folder; no
run folder is left without a checkpoint; a finished run rerun names its real checkpoint.

The run: BayesNCL on 1% of Fashion-MNIST, 2 epochs of 4 steps, a time interval checkpoint after
every step, the signal sent once the first checkpoint exists. The run that is interrupted,
resumed and rerun is long; each of its behaviours has a fast test too (SIGTERM here; the folder
a resumed run continues in, in ``tests/training/test_run_identity.py``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FASHION_MNIST, REPO, TINY_FASHION_MNIST, signal_after, untrained_checkpoint

pytestmark = [
    pytest.mark.solo,
    pytest.mark.slow,
    pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="Fashion-MNIST not installed"),
]


def _command(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "main_pretrain.py"),
        *TINY_FASHION_MNIST,
        "max_epochs=2",
        "++limit_train_batches=4",
        "++num_sanity_val_steps=0",
        "method_kwargs.proj_hidden_dim=64",
        "method_kwargs.proj_output_dim=32",
        "wandb.enabled=False",
        "++enable_progress_bar=False",
        f"checkpoint.dir={out}",
        *extra,
    ]


def _ddp_command(out: Path) -> list[str]:
    """Two processes (``strategy=ddp devices=2``), 3 epochs of 6 steps, a checkpoint each step."""
    return _command(
        out,
        "strategy=ddp",
        "devices=2",
        "data.fraction=0.05",
        "optimizer.batch_size=16",
        "max_epochs=3",
        "++limit_train_batches=6",
        "++checkpoint.time_interval_s=0.000001",
    )


def _env() -> dict[str, str]:
    """This environment without what an in-process run of an earlier test may have left in it
    (a benchmark parent's pid, a job's run): the command must start as a user starts it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLO_BAYESNCL_")}
    return {**env, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _signal_after(command: list[str], pattern: str, root: Path, signum: int, **to):
    return signal_after(command, pattern, root, signum, env=_env(), **to)


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )


def _folders(root: Path) -> list[Path]:
    return sorted(p for p in (root / "bayesncl").iterdir() if p.is_dir())


def _assert_interrupted(code: int, out: str, err: str, expected_code: int, command: list[str]):
    assert code == expected_code, (code, out[-2000:], err[-3000:])
    assert "finished" not in out, out[-2000:]
    match = re.search(r"== pretraining \S+ interrupted at epoch (\d+), step (\d+)", out)
    assert match, out[-2000:]
    ckpt = re.search(r"checkpoint:\s+(\S+\.ckpt)", out)
    assert ckpt and Path(ckpt.group(1)).is_file(), out[-2000:]
    assert "resume with the same command:" in out, out[-2000:]
    assert "main_pretrain.py" in out.split("resume with the same command:")[1]
    return Path(ckpt.group(1))


@pytest.mark.long
def test_ctrl_c_says_interrupted_exits_130_and_the_rerun_resumes_into_the_same_folder(tmp_path):
    command = _command(tmp_path, "++checkpoint.time_interval_s=0.000001")
    code, out, err = _signal_after(command, "bayesncl/*/*-step=*.ckpt", tmp_path, signal.SIGINT)
    ckpt = _assert_interrupted(code, out, err, 130, command)
    (folder,) = _folders(tmp_path)
    assert ckpt.parent == folder

    resumed = _run(command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"auto-resume: resuming the same run from {folder}" in resumed.stdout
    assert _folders(tmp_path) == [folder]  # one run, one folder
    final = re.search(r"checkpoint:\s+(\S+)", resumed.stdout).group(1)
    assert final.endswith("-ep=1.ckpt") and Path(final).parent == folder, resumed.stdout[-2000:]
    assert re.search(rf"metrics.csv: {re.escape(str(folder / 'metrics.csv'))}", resumed.stdout)

    again = _run(command)  # the run is finished: its summary still names what it wrote
    assert again.returncode == 0, again.stderr[-3000:]
    assert re.search(rf"checkpoint:\s+{re.escape(final)}", again.stdout), again.stdout[-2000:]
    assert "metrics.csv: none" not in again.stdout
    assert _folders(tmp_path) == [folder]
    for f in _folders(tmp_path):
        assert list(f.glob("*.ckpt")), f"{f} has no checkpoint"


def test_sigterm_says_interrupted_and_exits_143(tmp_path):
    command = _command(tmp_path, "++checkpoint.time_interval_s=0.000001")
    code, out, err = _signal_after(command, "bayesncl/*/*-step=*.ckpt", tmp_path, signal.SIGTERM)
    ckpt = _assert_interrupted(code, out, err, 143, command)
    assert [ckpt.parent] == _folders(tmp_path)


def test_ctrl_c_to_a_two_process_ddp_run_says_interrupted_and_exits_130(tmp_path):
    """A terminal's Ctrl-C reaches both processes of ``strategy=ddp devices=2``: the job stops,
    the launching process tells the story once and exits 130, and the checkpoint it names
    exists."""
    command = _ddp_command(tmp_path)
    code, out, err = _signal_after(
        command, "bayesncl/*/*-step=*.ckpt", tmp_path, signal.SIGINT, group=True
    )
    ckpt = _assert_interrupted(code, out, err, 130, command)
    assert out.count("== pretraining") == 1, out[-2000:]
    assert [ckpt.parent] == _folders(tmp_path)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_that_reaches_one_process_of_a_ddp_run_stops_the_whole_job(
    signum, status, tmp_path
):
    """The processes of a job take a signal at different points of a step (one inside a
    collective, one not): the job stops only where all of them agree. Sent to the rank-1
    process alone, the launching process still stops, says interrupted and exits 130 (143),
    where it used to wait in a collective its peer had left, and be killed."""
    command = _ddp_command(tmp_path)
    code, out, err = _signal_after(
        command, "bayesncl/*/*-step=*.ckpt", tmp_path, signum, children=True
    )
    ckpt = _assert_interrupted(code, out, err, status, command)
    assert out.count("== pretraining") == 1, out[-2000:]
    assert [ckpt.parent] == _folders(tmp_path)


def test_ctrl_c_to_a_linear_evaluation_says_interrupted_and_exits_130(image_folder, tmp_path):
    pretrained = untrained_checkpoint(
        tmp_path / "pretrained", "bayesncl.yaml", image_folder, 64, 32
    )
    command = [
        sys.executable,
        str(REPO / "main_linear.py"),
        f"pretrained_feature_extractor={pretrained}",
        "max_epochs=50",  # ends only when interrupted
        "optimizer.batch_size=8",
        "data.num_workers=0",
        "accelerator=cpu",
        f"checkpoint.dir={tmp_path / 'linear'}",
        "++enable_progress_bar=False",
    ]
    code, out, err = _signal_after(command, "linear/**/*-ep=0.ckpt", tmp_path, signal.SIGINT)
    assert code == 130, (out[-2000:], err[-3000:])
    assert re.search(r"== linear evaluation \S+ interrupted at epoch \d+, step \d+", out), out
    assert "run it again (it starts over): python" in out


def test_an_interruption_before_the_first_checkpoint_leaves_no_folder_without_one(tmp_path):
    command = _command(tmp_path, "++checkpoint.time_interval_s=3600")
    code, out, err = _signal_after(command, "bayesncl/*/args.json", tmp_path, signal.SIGINT)
    assert code == 130, (out[-2000:], err[-3000:])
    assert re.search(r"interrupted at epoch 0, step \d+", out), out[-2000:]
    assert "checkpoint:  none (interrupted before the first checkpoint" in out, out[-2000:]
    assert not (tmp_path / "bayesncl").is_dir() or _folders(tmp_path) == []


def test_a_launch_that_cannot_meet_its_peers_says_so_within_its_timeout(tmp_path):
    command = _command(tmp_path, "accelerator=cpu", "devices=1", "num_nodes=2")
    command.append("+distributed.timeout_s=5")  # the second node never comes
    try:  # a guard against a launch that waits forever, not a measure of its speed
        done = subprocess.run(
            command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the launch still waits for its second node after 600 s")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "waiting up to" not in done.stdout
    assert "wait up to 5 s for each other (distributed.timeout_s)" in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("main_pretrain.py: error: the job's 2 processes did not all connect"), (
        done.stderr[-3000:]
    )
    assert "distributed.timeout_s" in last
    assert "Traceback" not in done.stderr


def test_a_benchmark_stage_stopped_by_sigterm_is_reported_as_terminated_not_finished():
    from types import SimpleNamespace

    from lightning.pytorch.trainer.states import TrainerStatus

    from solo_bayesncl.benchmark.process import Terminated
    from solo_bayesncl.benchmark.stages import check_finished

    stopped = SimpleNamespace(
        interrupted=True,
        received_sigterm=True,
        state=SimpleNamespace(status=TrainerStatus.INTERRUPTED),
        current_epoch=2,
        max_epochs=6,
    )
    with pytest.raises(Terminated):  # run_one exits 143, not 130 as after Ctrl-C
        check_finished(stopped, "pretraining")

"""Several machines, tried on one: the launch lines of docs/training.md ("Several GPUs and nodes").

Every documented line's overrides must compose with the shipped configs. The lines the page gives
for two "machines" of one CPU process each (gloo) are run as written, with a free port for 29500
and a tiny run's settings appended: torchrun's c10d rendezvous, Lightning's own launcher started
by hand on each "machine" (``MASTER_ADDR``, ``MASTER_PORT``, ``NODE_RANK``), and the variables
srun sets. Each must be one run (one folder, one summary) training what ``devices=2`` on one
machine trains.
"""

from __future__ import annotations

import csv
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import FASHION_MNIST, REPO, compose

from solo_bayesncl.host.availability import solo_learn_available

DOC = REPO / "docs" / "training.md"
DOC_PORT = "29500"
TINY = [
    "data.dataset=fashion-mnist",
    "data.fraction=0.0016",  # 96 training images: 3 steps of a global batch of 32
    "data.val_fraction=0.002",
    "data.num_workers=0",
    "optimizer.batch_size=32",
    "method_kwargs.proj_hidden_dim=64",
    "method_kwargs.proj_output_dim=32",
    "wandb.enabled=False",
    "max_epochs=1",
    "++log_every_n_steps=1",
    "++enable_progress_bar=False",
]
STEPS_PER_EPOCH = 3

needs_training = pytest.mark.skipif(
    not solo_learn_available() or not (FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file(),
    reason="needs upstream solo-learn and Debian's dataset-fashion-mnist",
)


def _section() -> str:
    text = DOC.read_text()
    start = text.index("### Several GPUs and nodes")
    return text[start : text.index("\n### ", start + 1)]


def _launch_lines() -> list[str]:
    """The section's shell lines that start a pretraining, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", _section(), flags=re.S)
    lines = (
        shlex.join(shlex.split(line, comments=True)) for b in blocks for line in b.splitlines()
    )
    return [line for line in lines if "main_pretrain.py" in line]


def _overrides(line: str) -> list[str]:
    words = shlex.split(line)
    return words[words.index("main_pretrain.py") + 1 :]


def _override_sets() -> list[list[str]]:
    """The overrides of every documented launch line, each set once."""
    return [list(o) for o in dict.fromkeys(tuple(_overrides(line)) for line in _launch_lines())]


def test_the_page_shows_the_three_ways_onto_several_machines():
    lines = _launch_lines()
    assert any(line.startswith("srun ") and "num_nodes=2" in line for line in lines), lines
    assert any(line.startswith("torchrun --nnodes=2 ") for line in lines), lines
    assert any(line.startswith("MASTER_ADDR=") and "NODE_RANK=" in line for line in lines), lines


@pytest.mark.parametrize("folder", ["scripts/pretrain/cifar", "scripts/pretrain/imagenet-100"])
def test_every_documented_launch_line_composes_with_the_shipped_configs(folder):
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    for overrides in _override_sets():  # the four configs of a folder share its budget file
        try:
            cfg = compose(folder, "bayesncl.yaml", overrides)
        except (HydraException, OmegaConfBaseException) as err:
            pytest.fail(f"{folder} refuses `{' '.join(overrides)}`: {err}")
        assert cfg.num_nodes == (2 if "num_nodes=2" in overrides else 1)


@pytest.mark.solo
def test_documented_launch_lines_pass_the_checks_before_training():
    from solo_bayesncl.training.pretrain import prepare_pretrain

    for overrides in _override_sets():
        cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", overrides)
        spec = prepare_pretrain(cfg, check_data=False)
        nodes = 2 if "num_nodes=2" in overrides else 1
        devices = int(re.search(r"devices=(\d+)", " ".join(overrides)).group(1))
        assert spec.trainer.processes == devices * nodes, overrides


@pytest.mark.solo
def test_a_node_count_that_is_not_a_positive_integer_is_refused_naming_the_key():
    from solo_bayesncl.core.validation import ConfigError
    from solo_bayesncl.training.pretrain import prepare_pretrain

    for value in ("0", "two", "1.5", "true"):
        cfg = compose("scripts/pretrain/cifar", "bayesncl.yaml", [f"num_nodes={value}"])
        with pytest.raises(ConfigError, match=r"^num_nodes=.*: give the number of machines"):
            prepare_pretrain(cfg, check_data=False)


def _trainer(rank: int, first, loggers: list) -> SimpleNamespace:
    """A Trainer of a 2-process job as the agreement callback sees it, rank 0 having ``first``."""
    strategy = SimpleNamespace(
        broadcast=lambda obj, src: first.to_json(),
        reduce_boolean_decision=lambda decision, all: decision,
    )
    return SimpleNamespace(
        world_size=2,
        global_rank=rank,
        is_global_zero=rank == 0,
        strategy=strategy,
        loggers=loggers,
    )


def test_a_process_that_drew_another_new_run_takes_rank_zeros(tmp_path, capsys):
    pytest.importorskip("lightning")
    from lightning.pytorch.loggers import CSVLogger

    from solo_bayesncl.training.auto_resume import JobRun
    from solo_bayesncl.training.trainer import job_run_agreement

    first, mine = JobRun("aaaa1111", None, "f" * 16), JobRun("bbbb2222", None, "f" * 16)
    logger = CSVLogger(save_dir=str(tmp_path), name="", version="offline-bbbb2222")
    agreement = job_run_agreement(mine)
    agreement.setup(_trainer(1, first, [logger]), None, "fit")
    assert logger.log_dir == str(tmp_path / "offline-aaaa1111")
    checkpoint: dict = {}
    agreement.on_save_checkpoint(None, None, checkpoint)
    assert agreement.run == first and list(checkpoint.values()) == ["f" * 16]

    # resume_from_checkpoint: a new run from one checkpoint, its id drawn by each process
    ckpt = "/ck/offline-cccc3333/ep=0.ckpt"
    from_ckpt = job_run_agreement(JobRun("bbbb2222", ckpt, "f" * 16))
    from_ckpt.setup(_trainer(1, JobRun("aaaa1111", ckpt, "f" * 16), [logger]), None, "fit")
    assert from_ckpt.run == JobRun("aaaa1111", ckpt, "f" * 16)

    # the checkpoint is the files' to decide: a process that saw another (or none) stops
    resuming = JobRun("aaaa1111", "/ck/offline-aaaa1111/ep=0.ckpt", "f" * 16)
    with pytest.raises(RuntimeError, match="chose different runs .*checkpoint.dir"):
        job_run_agreement(mine).setup(_trainer(1, resuming, [logger]), None, "fit")
    other_config = JobRun("aaaa1111", None, "e" * 16)
    with pytest.raises(RuntimeError, match="chose different runs .*same config"):
        job_run_agreement(mine).setup(_trainer(1, other_config, [logger]), None, "fit")


def test_a_second_machine_started_by_hand_opens_no_wandb_run_of_its_own(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from omegaconf import OmegaConf

    from solo_bayesncl.config.settings import run_spec
    from solo_bayesncl.training.auto_resume import JobRun
    from solo_bayesncl.training.trainer import build_loggers

    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "GROUP_RANK", "WANDB_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("NODE_RANK", "1")  # as the second machine's command is started
    monkeypatch.chdir(tmp_path)
    cfg = {"wandb": {"enabled": True, "offline": True}, "name": "run"}
    spec = run_spec(OmegaConf.create(cfg)).trainer
    wandb_logger, _ = build_loggers(spec, tmp_path / "ck", JobRun("bbbb2222", None, "f" * 16))
    assert wandb_logger._experiment is None  # rank 0's run, named at setup, is the one run
    assert not (tmp_path / "wandb").exists()


# --- the lines run on one machine ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_machine_lines(kind: str) -> list[str]:
    """The page's lines starting with ``kind`` (``torchrun``, ``MASTER_ADDR``, ``SLURM_JOB_ID``,
    ``python``) that run on one computer, in the page's order."""
    lines = [line for line in _launch_lines() if line.startswith(kind)]
    return [line for line in lines if "127.0.0.1" in line or "accelerator=cpu devices=2" in line]


def _command(line: str, port: int, out: Path, extra: list[str]) -> tuple[list[str], dict]:
    """``line`` as this test runs it: its environment assignments into the environment, this
    Python for ``python`` and ``torchrun``, the checkout's script, ``port`` for 29500, then the
    tiny run's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLO_BAYESNCL_")}
    words = shlex.split(line.replace(DOC_PORT, str(port)))
    while re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    program = {
        "python": [sys.executable],
        "torchrun": [sys.executable, "-m", "torch.distributed.run"],
    }
    words = [*program[words[0]], *words[1:]]
    words[words.index("main_pretrain.py")] = str(REPO / "main_pretrain.py")
    return [*words, *TINY, f"checkpoint.dir={out}", *extra], env


def _start(command: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as f:
        return subprocess.Popen(
            command,
            cwd=log.parent,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # killed with what it starts
        )


def _launch(kind: str, tmp: Path, extra: list[str] = ()) -> list[subprocess.Popen]:
    """Starts the page's one-machine job of ``kind``; the processes in the page's order
    (node rank 0 first), each logging into ``tmp/<i>.log``."""
    port = _free_port()
    lines = _one_machine_lines(kind)
    if kind == "torchrun":
        lines = lines * 2  # the same line on both "machines"
    procs = []
    for i, line in enumerate(lines):
        command, env = _command(line, port, tmp / "ck", list(extra))
        procs.append(_start(command, env, tmp / f"{i}.log"))
    return procs


def _finish(procs: list[subprocess.Popen], tmp: Path) -> list[str]:
    """Waits for every process; their logs, asserting each succeeded."""
    for proc in procs:
        proc.wait(timeout=900)
    logs = [(tmp / f"{i}.log").read_text() for i in range(len(procs))]
    for proc, log in zip(procs, logs, strict=True):
        assert proc.returncode == 0, log[-4000:]
    return logs


def _kill(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def _rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _first_step(rows: list[dict[str, str]]) -> dict[str, float]:
    (row,) = [r for r in rows if r["step"] == "0" and r.get("train_loss_step")]
    return {k: float(row[k]) for k in ("train_loss_step", "train_nce_loss_step")}


def _trained(kind: str, tmp: Path) -> SimpleNamespace:
    procs = _launch(kind, tmp)
    try:
        logs = _finish(procs, tmp)
    finally:
        _kill(procs)
    root = tmp / "ck" / "bayesncl"
    folders = [p for p in root.iterdir() if p.is_dir()]
    return SimpleNamespace(logs=logs, root=root, folders=folders, out="\n".join(logs))


def _assert_one_run(run: SimpleNamespace) -> Path:
    (folder,) = run.folders
    run_id = folder.name.removeprefix("offline-")
    assert run.out.count("== pretraining") == 1, run.out[-4000:]
    assert run.out.count(f"run {run_id}: the 2 processes start it") == 1, run.out[-4000:]
    assert run.out.count("checkpoint:  ") == 1
    assert f"metrics.csv: {folder / 'metrics.csv'}" in run.out
    (ckpt,) = folder.glob("*.ckpt")
    assert f"checkpoint:  {ckpt}" in run.out
    return folder


@pytest.fixture(scope="module")
def by_hand(tmp_path_factory) -> SimpleNamespace:
    return _trained("MASTER_ADDR", tmp_path_factory.mktemp("by-hand"))


@pytest.fixture(scope="module")
def by_torchrun(tmp_path_factory) -> SimpleNamespace:
    return _trained("torchrun", tmp_path_factory.mktemp("torchrun"))


@pytest.fixture(scope="module")
def under_slurm(tmp_path_factory) -> SimpleNamespace:
    return _trained("SLURM_JOB_ID", tmp_path_factory.mktemp("slurm"))


@pytest.fixture(scope="module")
def on_one_machine(tmp_path_factory) -> SimpleNamespace:
    return _trained("python", tmp_path_factory.mktemp("devices-2"))


@needs_training
@pytest.mark.slow
def test_two_machines_started_by_hand_are_one_run(by_hand):
    folder = _assert_one_run(by_hand)
    node1 = by_hand.logs[1]  # the second machine says nothing of the run
    assert not re.search(r"^(== pretraining|run \w+: |checkpoint: )", node1, flags=re.M), node1
    assert _first_step(_rows(folder))["train_loss_step"] > 0


@needs_training
@pytest.mark.slow
@pytest.mark.long
def test_two_machines_through_torchrun_are_one_run(by_torchrun):
    _assert_one_run(by_torchrun)


@needs_training
@pytest.mark.slow
@pytest.mark.long
def test_two_machines_with_srun_s_variables_are_one_run(under_slurm):
    _assert_one_run(under_slurm)


@needs_training
@pytest.mark.slow
@pytest.mark.long
def test_two_machines_train_what_two_processes_on_one_machine_train(
    by_hand, by_torchrun, under_slurm, on_one_machine
):
    (reference,) = on_one_machine.folders
    expected = _first_step(_rows(reference))
    for run in (by_hand, by_torchrun, under_slurm):
        (folder,) = run.folders
        for key, value in _first_step(_rows(folder)).items():
            assert value == pytest.approx(expected[key], abs=1e-6), (key, folder)


def _readable(path: Path) -> bool:
    import torch

    try:
        torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - still being written
        return False
    return True


@needs_training
@pytest.mark.slow
@pytest.mark.long
def test_a_two_machine_job_killed_in_its_second_epoch_resumes_in_its_folder(tmp_path):
    extra = [
        "data.fraction=0.004",  # 240 images, 7 steps: an epoch long enough to be killed in
        "max_epochs=2",
        "++checkpoint.time_interval_s=0",  # epoch checkpoints only
    ]
    root = tmp_path / "ck" / "bayesncl"
    first = _launch("MASTER_ADDR", tmp_path, extra)
    try:
        while not any(_readable(p) for p in root.glob("*/*-ep=0.ckpt")):
            assert all(p.poll() is None for p in first), "the job ended before it was killed"
            time.sleep(0.2)
    finally:
        _kill(first)
    (ckpt0,) = root.glob("*/*-ep=0.ckpt")
    assert not list(root.glob("*/*-ep=1.ckpt")), "killed after the second epoch, not in it"

    again = _launch("MASTER_ADDR", tmp_path, extra)
    try:
        out = "\n".join(_finish(again, tmp_path))
    finally:
        _kill(again)
    folder = ckpt0.parent
    run_id = folder.name.removeprefix("offline-")
    assert f"auto-resume: resuming the same run from {ckpt0}" in out
    assert f"run {run_id}: the 2 processes resumed from epoch 1, step 7 ({ckpt0})" in out
    assert [p for p in root.iterdir() if p.is_dir()] == [folder]
    assert list(folder.glob("*-ep=1.ckpt"))
    # metrics.csv goes on: the resumed sitting appends epoch 1's steps and validation
    steps = [int(r["step"]) for r in _rows(folder) if r.get("train_loss_step")]
    assert steps[-7:] == list(range(7, 14)), steps
    assert [int(r["step"]) for r in _rows(folder) if r.get("val_acc1")][-1] == 13

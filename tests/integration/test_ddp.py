"""Multi-process training through Lightning's DDP, proven on the CPU with gloo.

``python main_pretrain.py ... accelerator=cpu devices=2 strategy=ddp`` is run as a user runs it:
Lightning's launcher starts rank 1 by re-running the command. The runs are tiny (96 Fashion-MNIST
training images, 3 steps of a global batch of 32) so that they fit in CI.

Why one and two processes cannot give bit-equal losses: on the CPU torch's SyncBatchNorm does not
run, so each of the two processes normalises its 16 images with their own BatchNorm statistics,
where one process normalises all 32 together; the forward pass, hence the loss and every later
step, differs slightly. Everything else is made equal: both runs use Lightning's
DistributedSampler (the one-process run with ``strategy=ddp devices=1``), so the global batches
hold the same images, and the augmentations are switched off (no crop, jitter, blur, flip), so
that neither the per-rank random streams nor the sampling order adds a difference. Measured on
this recipe: 0.17-0.32% relative difference on the first three steps; the tolerance is 2%.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import FASHION_MNIST, REPO, tiny_preset_file

from solo_bayesncl.host.availability import solo_learn_available

needs_solo = pytest.mark.skipif(not solo_learn_available(), reason="needs upstream solo-learn")
needs_fashion = pytest.mark.skipif(
    not (FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file(),
    reason="needs Debian's dataset-fashion-mnist",
)

STEPS_PER_EPOCH = 3  # 96 training images, global batch 32
TINY = [
    "data.dataset=fashion-mnist",
    "data.fraction=0.0016",  # 96 of the 60,000 training images
    "data.num_workers=0",
    "optimizer.batch_size=32",  # the global batch (batch_size_scope: global)
    "wandb.enabled=False",
    "accelerator=cpu",
    "strategy=ddp",
    "++enable_progress_bar=False",
]
NO_AUGMENTATION = [
    "augmentations.0.rrc.enabled=False",
    "augmentations.0.color_jitter.prob=0.0",
    "augmentations.0.grayscale.prob=0.0",
    "augmentations.0.gaussian_blur.prob=0.0",
    "augmentations.0.horizontal_flip.prob=0.0",
]
VAL_IMAGES = 101  # odd: a DistributedSampler would pad it to 102 over 2 processes


def _command(config: str, overrides: list[str]) -> list[str]:
    return [sys.executable, str(REPO / "main_pretrain.py"), "--config-name", config, *overrides]


def _run(config: str, overrides: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        _command(config, overrides), capture_output=True, text=True, cwd=cwd, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _rows(metrics_csv: Path) -> list[dict[str, str]]:
    with open(metrics_csv, newline="") as f:
        return list(csv.DictReader(f))


def _logged(rows: list[dict[str, str]], column: str) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r[column])) for r in rows if r.get(column)]


def _only_run_folder(root: Path) -> Path:
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    return folder


@pytest.fixture(scope="module")
def ncl_runs(tmp_path_factory) -> dict[int, SimpleNamespace]:
    """The same tiny NCL run with 1 process (strategy=ddp devices=1) and with 2."""
    if not solo_learn_available():
        pytest.skip("needs upstream solo-learn")
    if not (FASHION_MNIST / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("needs Debian's dataset-fashion-mnist")
    out = tmp_path_factory.mktemp("ddp")
    runs = {}
    for devices in (1, 2):
        overrides = [
            *TINY,
            *NO_AUGMENTATION,
            "data.val_fraction=0.0101",  # 101 validation images
            "max_epochs=1",
            "auto_resume.enabled=False",
            "++log_every_n_steps=1",
            "interpretability.enabled=True",
            f"devices={devices}",
            f"checkpoint.dir={out / f'p{devices}'}",
        ]
        proc = _run("ncl.yaml", overrides, out)
        folder = _only_run_folder(out / f"p{devices}" / "ncl")
        (ckpt,) = folder.glob("*.ckpt")
        runs[devices] = SimpleNamespace(
            proc=proc,
            folder=folder,
            ckpt=ckpt,
            rows=_rows(folder / "metrics.csv"),
            args=json.loads((folder / "args.json").read_text()),
        )
    return runs


@needs_solo
@needs_fashion
@pytest.mark.slow
def test_two_processes_are_one_run_with_one_folder_and_one_summary(ncl_runs):
    two = ncl_runs[2]
    stdout = two.proc.stdout
    assert stdout.count("== pretraining") == 1, stdout
    assert sum(map(_agreement, stdout.splitlines())) == 1
    assert stdout.count("sync_batchnorm: torch's SyncBatchNorm runs on GPUs only") == 1
    run_id = two.folder.name.removeprefix("offline-")
    assert stdout.count(f"run {run_id}: the 2 processes start it") == 1
    summary_ckpt = next(line for line in stdout.splitlines() if line.startswith("checkpoint:"))
    assert summary_ckpt.split(None, 1)[1] == str(two.ckpt)
    assert f"metrics.csv: {two.folder / 'metrics.csv'}" in stdout
    assert [p.name for p in two.folder.parent.iterdir()] == [two.folder.name]  # one folder
    assert two.args["devices"] == [0, 1] and two.args["sync_batchnorm"] is False


@needs_solo
@needs_fashion
@pytest.mark.slow
def test_one_and_two_processes_agree_on_the_first_steps(ncl_runs):
    import torch

    one, two = ncl_runs[1], ncl_runs[2]
    loss1, loss2 = (_logged(r.rows, "train_nce_loss_step") for r in (one, two))
    assert [s for s, _ in loss1] == [s for s, _ in loss2] == list(range(STEPS_PER_EPOCH))
    for (_, a), (_, b) in zip(loss1, loss2, strict=True):
        assert abs(a - b) <= 0.02 * abs(a), (loss1, loss2)
    # the same global batch and learning rate, split 32 = 2 x 16
    assert one.args["optimizer"]["global_batch_size"] == two.args["optimizer"]["global_batch_size"]
    assert (one.args["optimizer"]["batch_size"], two.args["optimizer"]["batch_size"]) == (32, 16)
    assert one.args["optimizer"]["lr"] == two.args["optimizer"]["lr"]
    for column in [c for c in one.rows[0] if c.startswith("lr-")]:
        assert _logged(one.rows, column) == _logged(two.rows, column), column
    state1, state2 = (
        torch.load(r.ckpt, map_location="cpu", weights_only=False)["state_dict"] for r in (one, two)
    )
    assert {k: tuple(v.shape) for k, v in state1.items()} == {
        k: tuple(v.shape) for k, v in state2.items()
    }


def _one_process_validation(ckpt: Path) -> tuple[float, float, int]:
    """Top-1 accuracy (%), mean cross-entropy and image count of the checkpoint's online
    classifier over the whole validation set, computed here in one process."""
    import torch
    import torch.nn.functional as F

    from solo_bayesncl.data.datasets import build_val_loader
    from solo_bayesncl.io.checkpoints import load_checkpoint, load_method

    loaded = load_checkpoint(ckpt)
    model = load_method(loaded)
    correct, loss_sum, count = 0, 0.0, 0
    with torch.no_grad():
        spec = loaded.spec
        batches = build_val_loader(
            spec.data, spec.optimizer.batch_size, None, spec.trainer.processes
        )
        for images, labels in batches:
            logits = model(images)["logits"]
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            correct += int((logits.argmax(1) == labels).sum())
            count += len(labels)
    return 100.0 * correct / count, loss_sum / count, count


@needs_solo
@needs_fashion
@pytest.mark.slow
def test_validation_counts_every_image_once_with_two_processes(ncl_runs):
    two = ncl_runs[2]
    acc1, loss, count = _one_process_validation(two.ckpt)
    assert count == VAL_IMAGES
    (logged_acc,) = [v for _, v in _logged(two.rows, "val_acc1")]
    (logged_loss,) = [v for _, v in _logged(two.rows, "val_loss")]
    assert logged_acc == pytest.approx(acc1, abs=1e-4)
    assert logged_loss == pytest.approx(loss, rel=1e-4)


@needs_solo
@needs_fashion
@pytest.mark.slow
def test_interpretability_figures_do_not_depend_on_the_process_count(ncl_runs, tmp_path):
    from solo_bayesncl.data.datasets import build_val_loader
    from solo_bayesncl.evaluation.report import ReportOptions, write_report
    from solo_bayesncl.io.checkpoints import load_checkpoint, load_method
    from solo_bayesncl.training.callback import build_interpretability_callback

    two = ncl_runs[2]
    logged = {
        c.removeprefix("interp/"): v
        for c in two.rows[0]
        if c.startswith("interp/")
        for _, v in _logged(two.rows, c)
    }
    assert "semantic_consistency" in logged
    loaded = load_checkpoint(two.ckpt)
    spec = loaded.spec
    callback = build_interpretability_callback(
        spec.interpretability,
        spec.data,
        spec.optimizer.batch_size,
        build_val_loader(spec.data, spec.optimizer.batch_size, None, spec.trainer.processes),
    )
    here = callback.evaluate(load_method(loaded))  # one process, the whole set
    options = ReportOptions(num_workers=0, device="cpu")
    write_report(two.ckpt, tmp_path / "report", options, progress=False)
    report = json.loads((tmp_path / "report" / "metrics.json").read_text())["metrics"]
    for name, value in logged.items():
        assert here[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    shared = set(report) & set(here)
    assert "semantic_consistency" in shared
    for name in shared:
        assert report[name] == pytest.approx(here[name], rel=1e-5, abs=1e-6), name


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the run ended before the point it was to be killed at"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _readable(path: Path) -> bool:
    import torch

    try:
        torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - still being written
        return False
    return True


def _start(config: str, overrides: list[str], log: Path) -> subprocess.Popen:
    """The command in the background, in a session of its own (so that it can be killed with
    the rank Lightning starts), its output into ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen(
            _command(config, overrides),
            cwd=log.parent,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _agreement(line: str) -> bool:
    """Rank 0's line once the processes agreed on the run (``run <id>: the 2 processes ...``)."""
    return line.startswith("run ") and ": the 2 processes " in line


def _kill_job(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # rank 0 and the rank Lightning started
    proc.wait(timeout=60)


@pytest.mark.long
@needs_solo
@needs_fashion
@pytest.mark.slow
def test_killed_two_process_run_resumes_and_a_changed_config_starts_anew(tmp_path):
    overrides = [
        *(o for o in TINY if not o.startswith("data.fraction=")),
        "data.fraction=0.004",  # 240 images, 7 steps: an epoch long enough to be killed in
        "data.val_fraction=0.005",
        "method_kwargs.proj_hidden_dim=64",
        "method_kwargs.proj_output_dim=32",
        "max_epochs=2",
        "devices=2",
        f"checkpoint.dir={tmp_path / 'ck'}",
        "++checkpoint.time_interval_s=0",  # epoch checkpoints only: the kill comes after one
    ]
    root = tmp_path / "ck" / "bayesncl"
    first = _start("bayesncl.yaml", overrides, tmp_path / "first.log")
    try:
        _wait_for(lambda: any(_readable(p) for p in root.glob("*/*-ep=0.ckpt")), first)
    finally:
        _kill_job(first)
    (ckpt0,) = root.glob("*/*-ep=0.ckpt")
    assert not list(root.glob("*/*-ep=1.ckpt")), "killed after the second epoch, not in it"
    csv_file = ckpt0.parent / "metrics.csv"
    written = _rows(csv_file) if csv_file.is_file() else []  # the killed sitting's rows

    again = _run("bayesncl.yaml", overrides, tmp_path)
    assert f"auto-resume: resuming the same run from {ckpt0}" in again.stdout
    (agreed,) = [line for line in again.stdout.splitlines() if _agreement(line)]
    assert agreed.endswith(f"the 2 processes resumed from epoch 1, step 7 ({ckpt0})")
    resumed = root / f"offline-{agreed.split()[1].rstrip(':')}"
    assert list(resumed.glob("*-ep=1.ckpt"))
    assert resumed == ckpt0.parent  # one run, one folder: its metrics.csv goes on
    rows = _rows(resumed / "metrics.csv")
    assert [(r["epoch"], r["step"]) for r in rows[: len(written)]] == [
        (r["epoch"], r["step"]) for r in written
    ]
    # the resumed sitting adds epoch 1 only (epoch 0 came from ckpt0); learning-rate rows
    # carry no epoch
    assert {int(r["epoch"]) for r in rows[len(written) :] if r["epoch"]} == {1}
    assert _logged(rows, "train_nce_loss_epoch")[-1][0] == 2 * 7 - 1

    changed = [*overrides, "method_kwargs.bayesian_kl_lambda=1.0e-4"]
    log = tmp_path / "changed.log"
    third = _start("bayesncl.yaml", changed, log)
    try:
        _wait_for(lambda: any(map(_agreement, log.read_text().splitlines())), third)
    finally:
        _kill_job(third)
    text = log.read_text()
    assert "the 2 processes start it" in text
    assert "starting a new run" in text and "method_kwargs.bayesian_kl_lambda" in text
    assert "resuming" not in text


@pytest.mark.long
@needs_solo
@pytest.mark.slow
def test_benchmark_trains_a_two_process_preset_as_one_job_per_run(image_folder, tmp_path):
    from solo_bayesncl.benchmark.presets import load_preset
    from solo_bayesncl.benchmark.runner import run_benchmark

    preset_file = tiny_preset_file(
        tmp_path / "two.yaml",
        image_folder,
        tmp_path / "results",
        methods=("ncl",),
        extra_overrides=("devices=2",),
    )
    (result,) = run_benchmark(load_preset(preset_file), log=lambda line: None)
    (run_dir,) = (tmp_path / "results" / "runs").iterdir()
    folder = _only_run_folder(run_dir / "pretrain" / "ncl")  # one run folder for both ranks
    args = json.loads((folder / "args.json").read_text())
    assert args["devices"] == [0, 1]
    assert (args["optimizer"]["batch_size"], args["optimizer"]["global_batch_size"]) == (4, 8)
    attempts = (run_dir / "pretrain_attempts.jsonl").read_text().splitlines()
    assert len(attempts) == 1  # written by rank 0 only
    assert Path(result["checkpoint"]).parent == folder
    assert 0 <= result["linear_top1"] <= 100 and 0 <= result["knn_top1"] <= 100
    linear_args = json.loads(next((run_dir / "linear").glob("*/*/args.json")).read_text())
    assert linear_args["devices"] == [0]  # the probe runs in the run's own process
    assert 0 <= result["metrics"]["semantic_consistency"] <= 1


# --- the pieces, without processes --------------------------------------------------------------


def _launched_as(monkeypatch, **env: str) -> None:
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


CFG = {"method": "ncl", "optimizer": {"lr": 0.4}, "devices": [0, 1]}


def test_a_launched_rank_takes_the_deciding_process_run_without_scanning(tmp_path, monkeypatch):
    from solo_bayesncl.training.auto_resume import (
        JOB_RUN_ENV,
        JobRun,
        config_fingerprint,
        decide_job_run,
        shared_with_launched_processes,
    )

    _launched_as(monkeypatch)
    lines: list[str] = []
    decided = decide_job_run(CFG, tmp_path, resume=True, log=lines.append)
    assert decided.ckpt_path is None and len(decided.run_id) == 8
    with shared_with_launched_processes(decided):
        inherited = os.environ[JOB_RUN_ENV]
    assert JOB_RUN_ENV not in os.environ  # gone after the fit: a later run decides anew

    monkeypatch.setenv(JOB_RUN_ENV, inherited)
    _launched_as(monkeypatch, LOCAL_RANK="1", NODE_RANK="0")  # as Lightning starts rank 1
    log = []
    assert decide_job_run(CFG, "/nonexistent", resume=True, log=log.append) == decided
    assert log == []  # no second scan, no second message
    other = {**CFG, "optimizer": {"lr": 0.5}}
    with pytest.raises(RuntimeError, match="differs from the one the job was started with"):
        decide_job_run(other, tmp_path, resume=True)
    # devices may differ between sittings of a run, never its training settings
    assert config_fingerprint({**CFG, "devices": [0]}) == config_fingerprint(CFG)
    assert config_fingerprint(other) != config_fingerprint(CFG)
    assert isinstance(decided, JobRun)


def test_externally_launched_processes_derive_one_run_id_from_the_job(tmp_path, monkeypatch):
    from solo_bayesncl.training.auto_resume import decide_job_run

    ids = []
    for rank in ("0", "1"):
        _launched_as(monkeypatch, SLURM_JOB_ID="4242", SLURM_PROCID=rank)
        ids.append(decide_job_run(CFG, tmp_path, resume=True).run_id)
    assert ids[0] == ids[1]
    _launched_as(monkeypatch, SLURM_JOB_ID="4243", SLURM_PROCID="0")
    assert decide_job_run(CFG, tmp_path, resume=True).run_id != ids[0]


def test_processes_that_disagree_on_the_run_all_stop(monkeypatch, capsys):
    pytest.importorskip("lightning")
    from solo_bayesncl.training.auto_resume import JobRun
    from solo_bayesncl.training.trainer import job_run_agreement

    mine = JobRun("aaaa1111", None, "f" * 16)
    rank0 = JobRun("bbbb2222", "/ck/ep=0.ckpt", "f" * 16)

    def trainer(rank: int, broadcast: JobRun) -> SimpleNamespace:
        strategy = SimpleNamespace(
            broadcast=lambda obj, src: broadcast.to_json(),
            reduce_boolean_decision=lambda decision, all: decision,
        )
        return SimpleNamespace(
            world_size=2, global_rank=rank, is_global_zero=rank == 0, strategy=strategy
        )

    with pytest.raises(RuntimeError, match="chose different runs"):
        job_run_agreement(mine).setup(trainer(1, rank0), None, "fit")
    agreement = job_run_agreement(rank0)
    agreement.setup(trainer(0, rank0), None, "fit")
    assert capsys.readouterr().out == ""  # said once the checkpoint is restored
    agreement.on_load_checkpoint(trainer(0, rank0), None, {"epoch": 0, "global_step": 7})
    agreement.on_fit_start(trainer(0, rank0), None)
    assert capsys.readouterr().out == (
        "run bbbb2222: the 2 processes resumed from epoch 1, step 7 (/ck/ep=0.ckpt)\n"
    )


def test_sync_batchnorm_is_off_on_the_cpu_with_one_notice(monkeypatch, capsys):
    from omegaconf import OmegaConf

    from solo_bayesncl.config.runtime import resolve_runtime

    def resolve() -> bool:
        cfg = OmegaConf.create({"accelerator": "cpu", "devices": 2, "sync_batchnorm": True})
        return resolve_runtime(cfg).sync_batchnorm

    _launched_as(monkeypatch)
    assert resolve() is False
    out = capsys.readouterr().out
    assert (
        out.count("\n") == 1 and "SyncBatchNorm runs on GPUs only" in out and "2 processes" in out
    )
    _launched_as(monkeypatch, LOCAL_RANK="1")
    assert resolve() is False
    assert capsys.readouterr().out == ""  # the launched rank says nothing


def test_each_rank_gets_random_streams_of_its_own(tmp_path):
    pytest.importorskip("lightning")
    import torch

    from solo_bayesncl.training.resumable import resumable_fit
    from solo_bayesncl.training.trainer import per_rank_random_streams

    def draws(callback, hook: str, rank: int, world: int, *args) -> torch.Tensor:
        torch.manual_seed(5)
        trainer = SimpleNamespace(world_size=world, global_rank=rank, current_epoch=3)
        getattr(callback, hook)(trainer, None, *(["fit"] if hook == "setup" else args))
        return torch.rand(4)

    streams = per_rank_random_streams()
    torch.manual_seed(5)
    untouched = torch.rand(4)
    assert torch.equal(draws(streams, "setup", 0, 1), untouched)  # one process: left as it is
    assert not torch.equal(draws(streams, "setup", 0, 2), draws(streams, "setup", 1, 2))
    # every pretraining process seeds by its position in the run and its rank
    seeder = resumable_fit(5)
    for hook, args in (("on_train_epoch_start", ()), ("on_train_batch_end", (None, None, 2))):
        assert torch.equal(draws(seeder, hook, 1, 2, *args), draws(seeder, hook, 1, 2, *args))
        assert not torch.equal(draws(seeder, hook, 0, 2, *args), draws(seeder, hook, 1, 2, *args))
    assert not torch.equal(
        draws(seeder, "on_train_batch_end", 1, 2, None, None, 2),
        draws(seeder, "on_train_batch_end", 1, 2, None, None, 3),
    )

"""Two warnings the README says a run does not print: solo-learn's "Using scheduler_interval=step
might generate issues when resuming a checkpoint." where nothing resumes (kNN, the report, the
linear probe), and Lightning's "number of training batches ... is smaller than the logging
interval" on a short epoch (pretraining, the linear probe, hence the benchmark's runs); and the
benchmark command starts without other projects' deprecation notices."""

from __future__ import annotations

import csv
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, compose, image_folder_overrides, tiny_pretrain_overrides

SCHEDULER_WARNING = "Using scheduler_interval="
LOG_INTERVAL_WARNING = "is smaller than the logging interval"


@pytest.fixture(scope="module")
def checkpoint(image_folder, tmp_path_factory) -> Path:
    from helpers import untrained_checkpoint

    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    return untrained_checkpoint(
        tmp_path_factory.mktemp("quiet") / "bayesncl", "bayesncl.yaml", image_folder, 32, 16
    )


def _scheduler_records(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if SCHEDULER_WARNING in r.getMessage()]


@pytest.mark.solo
def test_knn_prints_no_scheduler_warning(checkpoint, tmp_path, caplog, capfd):
    from solo_bayesncl.cli.knn import main

    caplog.set_level(logging.WARNING)
    args = [str(checkpoint), "--k", "1", "--num-workers", "0", "--batch-size", "8"]
    assert main(args) == 0
    assert _scheduler_records(caplog) == []
    assert SCHEDULER_WARNING not in capfd.readouterr().err


@pytest.mark.solo
def test_the_report_prints_no_scheduler_warning(checkpoint, image_folder, tmp_path, caplog, capfd):
    from solo_bayesncl.evaluation.report import ReportOptions, write_report

    caplog.set_level(logging.WARNING)
    write_report(
        checkpoint,
        tmp_path / "report",
        ReportOptions(
            dataset=image_folder / "val",
            batch_size=8,
            num_workers=0,
            top_dims=2,
            images_per_dim=2,
            shuffle_permutations=1,
        ),
        progress=False,
    )
    assert _scheduler_records(caplog) == []
    assert SCHEDULER_WARNING not in capfd.readouterr().err


@pytest.mark.solo
def test_only_that_warning_is_dropped_and_only_where_nothing_resumes(image_folder, caplog):
    from helpers import method_of

    from solo_bayesncl.host.models import without_resume_warning
    from solo_bayesncl.training.pretrain import prepare_pretrain

    cfg = prepare_pretrain(
        compose(
            "scripts/pretrain/cifar",
            "ncl.yaml",
            [*image_folder_overrides(image_folder), "accelerator=cpu", "optimizer.batch_size=8"],
        ),
        check_data=False,
    ).solo
    caplog.set_level(logging.WARNING)
    method_of(cfg.copy())  # pretraining: its checkpoints are resumed, the warning stays
    assert len(_scheduler_records(caplog)) == 1
    caplog.clear()
    with without_resume_warning():
        method_of(cfg.copy())
        logging.getLogger().warning("another warning")
    assert _scheduler_records(caplog) == []
    assert [r.getMessage() for r in caplog.records] == ["another warning"]
    assert logging.getLogger().filters == []  # the filter leaves with the block


def _python(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=900
    )


@pytest.mark.long
@pytest.mark.solo
@pytest.mark.slow
def test_a_short_pretraining_and_its_linear_probe_log_every_batch_without_warnings(
    image_folder, tmp_path
):
    pretrain = _python(
        [
            str(REPO / "main_pretrain.py"),
            "--config-name",
            "ncl.yaml",
            *tiny_pretrain_overrides(image_folder, tmp_path),
        ],
        tmp_path,
    )
    assert pretrain.returncode == 0, pretrain.stderr[-3000:]
    assert LOG_INTERVAL_WARNING not in pretrain.stderr, pretrain.stderr[-3000:]
    (ckpt,) = (tmp_path / "ncl").glob("*/*.ckpt")
    with open(ckpt.parent / "metrics.csv", newline="") as f:
        steps = [r for r in csv.DictReader(f) if r.get("train_nce_loss_step")]
    assert len(steps) >= 1  # 72 images in batches of 8: 9 steps, logged every 9th at most

    linear = _python(
        [
            str(REPO / "main_linear.py"),
            f"pretrained_feature_extractor='{ckpt}'",
            "max_epochs=1",
            "data.num_workers=0",
            "optimizer.batch_size=8",
            f"checkpoint.dir={tmp_path}",
            "accelerator=cpu",
        ],
        tmp_path,
    )
    assert linear.returncode == 0, linear.stderr[-3000:]
    for warning in (LOG_INTERVAL_WARNING, SCHEDULER_WARNING):
        assert warning not in linear.stderr, linear.stderr[-3000:]


@pytest.mark.solo
def test_the_benchmark_starts_without_other_projects_warnings_and_keeps_its_own(tmp_path):
    """The benchmark command loads solo-learn (timm, Lightning) as the pretraining command does,
    with the same filter of their known deprecation and registry notices; a warning about the
    user's run still shows."""
    code = (
        "import sys, warnings\n"
        "from solo_bayesncl.cli.benchmark import main\n"
        "status = main(['--preset', 'cpu', '--table-only', '--out', sys.argv[1]])\n"
        "warnings.warn('precision=16 is not supported on CPU; using 32', UserWarning)\n"
        "sys.exit(status)\n"
    )
    done = _python(["-c", code, str(tmp_path / "out")], cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]  # no finished run to tabulate
    noisy = ("pkg_resources is deprecated", "Importing from timm", "Overwriting", "custom_fwd")
    assert [n for n in noisy if n in done.stderr] == [], done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines[0] == f"error: no finished run of preset cpu in {tmp_path / 'out' / 'runs'}"
    assert "UserWarning: precision=16 is not supported on CPU; using 32" in lines[1]

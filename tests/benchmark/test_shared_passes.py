"""The passes around pretraining that a benchmark run shares or leaves out give the figures of the
separate passes: kNN and the report read one pass over the validation images, and the linear
probe validates once, after its last epoch."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, run_order, untrained_checkpoint
from torch.utils.data import DataLoader

pytest.importorskip("solo", reason="needs upstream solo-learn installed")
pytest.importorskip("matplotlib", reason="the report pictures need matplotlib")

from solo_bayesncl.benchmark import stages  # noqa: E402
from solo_bayesncl.evaluation import knn, report_data  # noqa: E402
from solo_bayesncl.evaluation.knn import knn_eval  # noqa: E402
from solo_bayesncl.evaluation.report import (  # noqa: E402
    ReportError,
    ReportOptions,
    prepare_report,
    write_report,
)

REPORT = {"num_workers": 0, "top_dims": 4, "images_per_dim": 3, "shuffle_permutations": 2}


class _Status:
    def update(self, **kwargs) -> None:
        pass


@pytest.fixture(scope="module")
def checkpoint(image_folder, tmp_path_factory) -> Path:
    return untrained_checkpoint(
        tmp_path_factory.mktemp("ckpt") / "bayesncl", "bayesncl.yaml", image_folder, 32, 16
    )


@pytest.fixture
def passes(monkeypatch) -> list[int]:
    """The size of the dataset of every feature pass kNN and the report make."""
    sizes: list[int] = []
    for module in (knn, report_data):
        original = module.extract_representations

        def counting(model, loader, *args, _original=original, **kwargs):
            sizes.append(len(loader.dataset))
            return _original(model, loader, *args, **kwargs)

        monkeypatch.setattr(module, "extract_representations", counting)
    return sizes


def _report_files(folder: Path) -> tuple[dict, dict[str, np.ndarray]]:
    with np.load(folder / "features.npz") as bundle:
        arrays = {name: bundle[name] for name in bundle.files}
    return json.loads((folder / "metrics.json").read_text()), arrays


def test_knn_and_report_through_one_pass_equal_their_own_passes(
    checkpoint, image_folder, tmp_path, passes
):
    spec = run_order(knn={"k": 3}, report=ReportOptions(**REPORT))
    shared = stages.ValidationPass(spec.report, str(checkpoint))
    assert shared.shared_with_knn
    knn_shared = stages.knn_stage(spec, str(checkpoint), _Status(), shared)
    report_shared = stages.report_stage(
        spec, tmp_path / "shared", str(checkpoint), _Status(), shared
    )
    # one pass over the 72 training images (kNN's alone) and one over the 36 validation images
    assert sorted(passes) == [36, 72]

    passes.clear()
    knn_alone = knn_eval(checkpoint, ks=(3,), temperature=0.07, num_workers=0)
    write_report(checkpoint, tmp_path / "alone", ReportOptions(**REPORT), progress=False)
    assert sorted(passes) == [36, 36, 72]  # kNN's and the report's own validation passes

    assert knn_shared["knn_top1"] == knn_alone["knn_top1_k3"]
    metrics_shared, arrays_shared = _report_files(tmp_path / "shared" / "report")
    metrics_alone, arrays_alone = _report_files(tmp_path / "alone")
    assert report_shared["metrics"] == metrics_alone["metrics"]
    assert metrics_shared == metrics_alone  # every figure, dimension row and gate rate
    assert arrays_shared.keys() == arrays_alone.keys()
    for name, array in arrays_alone.items():
        np.testing.assert_array_equal(arrays_shared[name], array, err_msg=name)


def test_shared_backbone_features_are_knns_own_validation_features(checkpoint):
    prepared = prepare_report(
        checkpoint, ReportOptions(num_workers=0), progress=False, with_backbone=True
    )
    loader_features = knn._features(  # kNN's own pass over the validation set
        prepared.inputs.model,
        DataLoader(prepared.inputs.images.dataset, batch_size=256, shuffle=False),
        "backbone",
    )
    assert prepared.data.backbone_features.shape == (36, 512)
    assert prepared.data.backbone_features.dtype == loader_features[0].dtype
    assert bool((prepared.data.backbone_features == loader_features[0]).all())
    assert prepared.data.labels.tolist() == loader_features[1].tolist()


@pytest.mark.parametrize(
    ("options", "shared"),
    [
        ({}, True),
        ({"num_workers": 0, "top_dims": 4, "thumbnail_size": 16}, True),
        ({"batch_size": 64}, False),
        ({"max_images": 10}, False),
        ({"dataset": "cifar10"}, False),
        ({"device": "cpu"}, False),
    ],
)
def test_the_pass_is_shared_only_where_it_is_knns_pass(options, shared):
    assert stages.ValidationPass(ReportOptions(**options), "x.ckpt").shared_with_knn is shared


def test_knn_refuses_validation_features_of_another_set(checkpoint):
    import torch

    with pytest.raises(ValueError, match=r"^val_features hold 5 features and 5 labels; the "):
        knn_eval(checkpoint, ks=(3,), val_features=(torch.zeros(5, 512), torch.zeros(5)))


def test_a_report_refuses_a_pass_made_with_other_options(checkpoint, tmp_path):
    options = ReportOptions(num_workers=0, thumbnail_size=16)
    prepared = prepare_report(checkpoint, options, progress=False)
    with pytest.raises(ReportError, match=r"made with thumbnail_size=16, this report asks for "):
        write_report(checkpoint, tmp_path / "r", ReportOptions(num_workers=0), prepared=prepared)
    assert not (tmp_path / "r" / "metrics.json").exists()


def test_the_linear_stage_validates_once_after_its_last_epoch(checkpoint, tmp_path):
    from solo_bayesncl.config.shipped import linear_dir_for

    config_dir = REPO / "scripts/pretrain/cifar"
    spec = run_order(
        seed=5,
        config_dir=str(config_dir),
        linear_config_dir=str(linear_dir_for(config_dir)),
        linear={
            "max_epochs": 2,
            "batch_size": 8,
            "lr": 0.1,
            "overrides": ["data.num_workers=0", "checkpoint.enabled=False"],
        },
    )
    result = stages.linear_stage(spec, tmp_path, str(checkpoint), _Status())
    with open(result["linear_metrics_csv"], newline="") as f:
        validated = [row for row in csv.DictReader(f) if row.get("val_acc1")]
    assert [row["epoch"] for row in validated] == ["1"]
    assert result["linear_top1"] == float(validated[0]["val_acc1"])


def test_a_schedule_reading_the_validation_loss_keeps_validating_every_epoch():
    from omegaconf import OmegaConf

    from solo_bayesncl.config.settings import run_spec

    cfg = OmegaConf.create({"max_epochs": 4, "scheduler": {"name": "reduce"}})
    stages.validate_at_end_only(cfg, run_spec(cfg))
    assert "check_val_every_n_epoch" not in cfg
    cfg.scheduler.name = "step"
    stages.validate_at_end_only(cfg, run_spec(cfg))
    assert (cfg.check_val_every_n_epoch, cfg.num_sanity_val_steps) == (4, 0)

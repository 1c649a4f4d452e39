"""A broken model never scores well: NaN/Inf features are refused by the evaluation report, kNN,
linear evaluation and the metrics, and stop training instead of hiding in zero rows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import image_folder_overrides

from solo_bayesncl.metrics import compute_interpretability_metrics, sparsity


def test_metrics_count_the_non_finite_rows() -> None:
    from solo_bayesncl.metrics import non_finite_rows

    features = torch.rand(10, 4)
    features[2, 1] = math.nan
    features[7] = math.inf
    assert non_finite_rows(features) == 2
    with pytest.raises(ValueError, match=r"^features has 2 of 10 rows with NaN or Inf values$"):
        sparsity(features)
    with pytest.raises(ValueError, match="2 of 10 rows"):
        compute_interpretability_metrics(features, torch.zeros(10, dtype=torch.long), 2)


# ---------------------------------------------------------------- checkpoints (need solo-learn)

NUM_DIMS = 16


def _checkpoint(folder: Path, config: str, image_folder: Path, scale: float | None) -> Path:
    """A solo-learn-layout checkpoint of an untrained model whose backbone's last batch-norm
    scale and shift are ``scale``: 3e38 keeps every weight finite but overflows the features to Inf (the
    features checks), NaN makes the weights themselves broken (the weights check)."""
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from helpers import untrained_checkpoint

    def set_scale(model) -> None:
        model.backbone.layer4[-1].bn2.weight.fill_(scale)
        model.backbone.layer4[-1].bn2.bias.fill_(scale)  # 3e38 + 3e38 = Inf in float32

    return untrained_checkpoint(
        folder, config, image_folder, 16, NUM_DIMS, edit=None if scale is None else set_scale
    )


@pytest.fixture(scope="module")
def nan_checkpoints(image_folder, tmp_path_factory) -> dict[str, Path]:
    """Finite weights, features that overflow to Inf."""
    root = tmp_path_factory.mktemp("overflow-runs")
    return {
        name: _checkpoint(root / name, f"{name}.yaml", image_folder, scale=3e38)
        for name in ("bayesncl", "ncl")
    }


@pytest.fixture(scope="module")
def nan_weights_checkpoint(image_folder, tmp_path_factory) -> Path:
    """An NCL checkpoint holding NaN weights (a diverged run)."""
    root = tmp_path_factory.mktemp("nan-weights")
    return _checkpoint(root / "ncl", "ncl.yaml", image_folder, scale=math.nan)


def _nan_weights_message(ckpt: Path) -> str:
    return (
        f"{ckpt}: 2 weight tensor(s) hold NaN or Inf (the first: backbone.layer4.1.bn2.weight): broken "
        "weights, e.g. a diverged run"
    )


def test_every_command_refuses_nan_weights_with_one_message(
    nan_weights_checkpoint, image_folder, tmp_path, capsys
) -> None:
    """The report, kNN, linear evaluation and zoo export run one check on a checkpoint and
    refuse NaN weights with the same one-line message, before any data is read."""
    pytest.importorskip("matplotlib", reason="the report pictures need matplotlib")
    from helpers import run_command

    from solo_bayesncl.cli.evaluate import main as report_main
    from solo_bayesncl.cli.knn import main as knn_main
    from solo_bayesncl.cli.zoo import main as zoo_main

    ckpt = nan_weights_checkpoint
    expected = _nan_weights_message(ckpt)
    assert report_main([str(ckpt), "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {expected}"
    with pytest.raises(SystemExit) as code:
        knn_main([str(ckpt), "--num-workers", "0"])
    assert code.value.code == 2
    assert capsys.readouterr().err.strip() == f"solo-bayesncl-knn: error: {expected}"
    assert zoo_main(["export", str(ckpt), "--name", "x", "--out", str(tmp_path / "z")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {expected}"
    assert not (tmp_path / "z" / "x.pt").exists() and not (tmp_path / "z" / "x.entry.json").exists()
    linear = run_command(
        [
            "main_linear.py",
            f"pretrained_feature_extractor='{ckpt}'",
            "data.dataset=custom",
            f"data.train_path={image_folder / 'train'}",
            f"data.val_path={image_folder / 'val'}",
            "accelerator=cpu",
            f"checkpoint.dir={tmp_path / 'lin'}",
        ]
    )
    assert linear.returncode == 2, linear.stderr[-2000:]
    assert linear.stderr.strip().splitlines()[-1] == f"main_linear.py: error: {expected}"
    assert "Traceback" not in linear.stderr


@pytest.mark.parametrize("method", ["bayesncl", "ncl"])
def test_report_refuses_a_nan_checkpoint(nan_checkpoints, tmp_path, capsys, method) -> None:
    pytest.importorskip("matplotlib", reason="the report pictures need matplotlib")
    from solo_bayesncl.cli.evaluate import main

    ckpt = nan_checkpoints[method]
    out = tmp_path / "report"
    assert main([str(ckpt), "--out", str(out), "--num-workers", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {ckpt}: the model gives NaN or Inf features for 36 of 36 images (broken "
        "weights, e.g. a diverged run); no report written"
    )
    assert not (out / "metrics.json").exists()


def test_knn_refuses_a_nan_checkpoint(nan_checkpoints) -> None:
    from solo_bayesncl.evaluation.knn import knn_eval

    ckpt = nan_checkpoints["ncl"]
    with pytest.raises(ValueError) as err:
        knn_eval(ckpt, ks=[1], feature="backbone", num_workers=0, device="cpu")
    assert str(err.value) == (
        f"{ckpt}: the model gives NaN or Inf backbone features for 72 of 72 training, 36 of 36 "
        "validation images (broken weights, e.g. a diverged run)"
    )


def test_linear_evaluation_stops_on_nan_backbone_features(nan_checkpoints, image_folder, tmp_path):
    from helpers import compose

    from solo_bayesncl.training.linear import linear_eval

    ckpt = nan_checkpoints["ncl"]
    cfg = compose(
        "scripts/linear/cifar",
        "linear.yaml",
        [
            f"pretrained_feature_extractor='{ckpt}'",
            *image_folder_overrides(image_folder),
            "data.num_workers=0",
            "optimizer.batch_size=8",
            "max_epochs=1",
            f"checkpoint.dir={tmp_path}",
            "checkpoint.enabled=False",
            "accelerator=cpu",
        ],
    )
    with pytest.raises(
        ValueError, match=rf"^{ckpt}: the backbone gives NaN or Inf features for 8 of"
    ):
        linear_eval(cfg)


# ---------------------------------------------------------------- training


def _model_and_batch(image_folder, config: str):
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    from helpers import compose
    from solo.methods import METHODS

    from solo_bayesncl.training.pretrain import prepare_pretrain

    cfg = prepare_pretrain(
        compose(
            "scripts/pretrain/cifar",
            config,
            [
                *image_folder_overrides(image_folder),
                "method_kwargs.proj_hidden_dim=16",
                f"method_kwargs.proj_output_dim={NUM_DIMS}",
                "optimizer.batch_size=4",
                "accelerator=cpu",
            ],
        ),
        check_data=False,
    ).solo
    torch.manual_seed(0)
    model = METHODS[cfg.method](cfg)
    model.log_dict = lambda *a, **k: None
    x = torch.rand(4, 3, 32, 32)
    return model, (torch.arange(4), [x, x.flip(3)], torch.tensor([0, 1, 2, 3]))


@pytest.mark.parametrize("config", ["bayesncl.yaml", "ncl.yaml"])
@pytest.mark.solo
def test_nan_in_z_stops_training_with_the_row_count(image_folder, config) -> None:
    from solo_bayesncl.methods.ncl import NonFiniteTrainingError

    model, batch = _model_and_batch(image_folder, config)
    with torch.no_grad():
        model.projector[-1].bias[3] = math.nan  # every row of z gets a NaN
    loss = model.training_step(batch, 0)
    assert math.isnan(loss.item())  # not a finite loss over zeroed rows
    loss.backward()
    with pytest.raises(NonFiniteTrainingError) as err:
        model.on_before_optimizer_step(None)
    message = str(err.value)
    assert message.startswith("training stopped at a training step: 8 of 8 rows of z")
    assert "the loss is NaN or Inf" in message


@pytest.mark.solo
def test_finite_step_passes_and_non_finite_gradient_stops(image_folder) -> None:
    from solo_bayesncl.methods.ncl import NonFiniteTrainingError

    model, batch = _model_and_batch(image_folder, "ncl.yaml")
    model.training_step(batch, 0).backward()
    model.on_before_optimizer_step(None)  # a healthy step goes on
    model.zero_grad()
    model.training_step(batch, 0).backward()
    model.projector[0].weight.grad[0, 0] = math.inf
    with pytest.raises(NonFiniteTrainingError, match="the gradient norm is inf"):
        model.on_before_optimizer_step(None)


@pytest.mark.slow
@pytest.mark.solo
def test_a_diverging_run_stops_with_a_clear_message(image_folder, tmp_path) -> None:
    from helpers import compose, tiny_pretrain_overrides
    from lightning.pytorch.callbacks import Callback

    from solo_bayesncl.methods.ncl import NonFiniteTrainingError
    from solo_bayesncl.training.pretrain import pretrain

    class BreakWeights(Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == 1:
                with torch.no_grad():
                    module.projector[0].weight.fill_(math.inf)

    cfg = compose(
        "scripts/pretrain/cifar",
        "ncl.yaml",
        tiny_pretrain_overrides(image_folder, tmp_path) + ["checkpoint.enabled=False"],
    )
    with pytest.raises(NonFiniteTrainingError, match=r"training stopped at epoch 0, step 1: "):
        pretrain(cfg, extra_callbacks=[BreakWeights()])

"""The study at a trained budget: the converged probe, the callback's probe and background
measures against the checkpoint path, the budget-curve plot and the benchmark's ``--seeds``."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import FASHION_MNIST, fake_result, tiny_preset_file
from omegaconf import OmegaConf

from solo_bayesncl.benchmark.plots import plot_budget_curves
from solo_bayesncl.benchmark.presets import PresetError, load_preset
from solo_bayesncl.metrics.probe import logistic_probe


def _blobs(n: int, classes: int, spread: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, 16)) * 10
    labels = rng.integers(0, classes, size=n)
    return centres[labels] + spread * rng.normal(size=(n, 16)), labels


def test_logistic_probe_separates_separable_classes_and_reports_convergence():
    train_x, train_y = _blobs(300, 3, 0.5, 0)
    val_x, val_y = _blobs(100, 3, 0.5, 0)  # the same centres
    result = logistic_probe(train_x, train_y, val_x, val_y)
    assert result.top1 == 100.0 and result.converged and 0 < result.iterations < 5000


def test_logistic_probe_reads_chance_on_random_labels():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(600, 8)), rng.integers(0, 4, size=600)
    result = logistic_probe(x[:400], y[:400], x[400:], y[400:])
    assert 10.0 < result.top1 < 40.0  # chance is 25%


def test_logistic_probe_refuses_empty_features_and_a_single_class():
    x, y = _blobs(20, 2, 0.5, 0)
    with pytest.raises(ValueError, match="needs training and validation features"):
        logistic_probe(x[:0], y[:0], x, y)
    with pytest.raises(ValueError, match="at least two classes"):
        logistic_probe(x, np.zeros(20, dtype=int), x, y)


@pytest.mark.solo
def test_interpretability_probe_must_be_a_boolean():
    from solo_bayesncl.config.settings import check_interpretability

    cfg = OmegaConf.create({"interpretability": {"enabled": True, "probe": "yes"}})
    with pytest.raises(
        ValueError, match=r"^interpretability\.probe='yes' is not a boolean; allowed: true, false"
    ):
        check_interpretability(cfg)


def _metrics_csv(path: Path, rows: list[dict[str, float]]) -> Path:
    columns = sorted({k for row in rows for k in row})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_budget_curves_are_drawn_only_from_runs_that_logged_the_probe(tmp_path):
    results = []
    for seed in (1, 2):
        rows = [
            {
                "epoch": e - 1,
                "interp/semantic_consistency_gain": 0.1 * e + seed,
                "interp/probe_top1": 50.0 + e,
            }  # fmt: skip
            for e in (5, 10)
        ]
        csv_path = _metrics_csv(tmp_path / f"m{seed}.csv", rows)
        results.append(fake_result("ncl", seed, 0.1, pretrain_metrics_csv=str(csv_path)))
    out = plot_budget_curves(results, tmp_path / "budget.png")
    assert out is not None and out.stat().st_size > 10_000
    bare = _metrics_csv(tmp_path / "bare.csv", [{"epoch": 0, "interp/active_dims": 3.0}])
    without = [fake_result("ncl", 1, 0.1, pretrain_metrics_csv=str(bare))]
    assert plot_budget_curves(without, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


@pytest.mark.long
@pytest.mark.solo
def test_benchmark_runs_only_the_seeds_asked_for_and_tables_the_rest_as_unfinished(
    image_folder, tmp_path
):
    from solo_bayesncl.benchmark.runner import run_benchmark

    preset = load_preset(
        tiny_preset_file(
            tmp_path / "tiny.yaml", image_folder, tmp_path / "out", methods=("ncl",), seeds=[5, 6]
        )
    )
    with pytest.raises(
        PresetError, match="--seeds 7 is not a seed of preset tiny; its seeds: 5, 6"
    ):
        run_benchmark(preset, seeds=[7], progress=False, log=lambda _: None)
    log: list[str] = []
    results = run_benchmark(preset, seeds=[6], progress=False, log=log.append)
    assert [r["seed"] for r in results] == [6]
    assert not any("seed 5" in line for line in log if line.startswith("[run]"))
    md = (tmp_path / "out" / "results.md").read_text()
    assert "Not finished yet, so in no figure above (1 run): ncl seed 5" in md


def test_benchmark_seeds_option_is_checked_on_the_command_line(capsys):
    from solo_bayesncl.cli.benchmark import main

    with pytest.raises(SystemExit) as exc:
        main(["--preset", "cpu", "--seeds", "one"])
    assert exc.value.code == 2
    assert "'one' is not a comma-separated list of integers" in capsys.readouterr().err


@pytest.mark.long
@pytest.mark.solo
@pytest.mark.skipif(not FASHION_MNIST.is_dir(), reason="needs Debian's dataset-fashion-mnist")
def test_callback_probe_and_background_figures_equal_the_checkpoint_measures(tmp_path):
    """The same figures along two paths: the callback during training (model in memory, the
    pretraining loaders) and background_measures on the saved checkpoint (loaded anew, its own
    loaders)."""
    from helpers import compose

    from solo_bayesncl.evaluation.background import background_measures
    from solo_bayesncl.training.pretrain import pretrain
    from study.background_gates import gate_measures

    cfg = compose(
        "scripts/pretrain/cifar",
        "bayesncl.yaml",
        [
            "data.dataset=fashion-mnist-scenes",
            "++data.num_backgrounds=4",
            "data.fraction=0.01",
            "data.val_fraction=0.02",
            "data.num_workers=0",
            "max_epochs=1",
            "optimizer.batch_size=64",
            "method_kwargs.proj_hidden_dim=64",
            "method_kwargs.proj_output_dim=32",
            "interpretability.enabled=True",
            "++interpretability.probe=True",
            "accelerator=cpu",
            "wandb.enabled=False",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
        ],
    )
    trainer = pretrain(cfg)
    logged = trainer.callback_metrics
    ckpt = next((tmp_path / "ckpt").rglob("*.ckpt"))
    measured = background_measures(ckpt, num_workers=0)
    assert float(logged["interp/probe_top1"]) == pytest.approx(measured["probe_class_top1"])
    assert float(logged["interp/probe_background_top1"]) == pytest.approx(
        measured["probe_background_top1"]
    )
    for key in ("background_consistency_gain", "background_dims_share"):
        assert float(logged[f"interp/{key}"]) == pytest.approx(measured[key], abs=1e-6), key
    assert float(logged["interp/probe_converged"]) == 1.0
    # a gated method: what its gate does with u's background-dominated dimensions
    for key in ("ungated_background_dims_share", "open_rate_class_dims"):
        assert 0.0 <= measured[key] <= 1.0, key
    rate = measured["open_rate_background_dims"]
    assert math.isnan(rate) or 0.0 <= rate <= 1.0
    corr = measured["open_rate_lift_correlation"]
    assert math.isnan(corr) or -1.0 <= corr <= 1.0
    assert json.dumps(measured)  # plain numbers
    # the gate's measures alone (for runs recorded before they existed) are the same numbers
    alone = gate_measures(ckpt, num_workers=0)
    assert set(alone) == {
        k for k in measured if "open_rate" in k or k.startswith(("ungated", "gate_probability"))
    }
    assert {"gate_probability_background_dims", "gate_probability_class_dims"} <= set(alone)
    assert 0.0 <= alone["gate_probability_class_dims"] <= 1.0
    for key, value in alone.items():
        assert value == pytest.approx(measured[key], nan_ok=True), key

"""One benchmark run (a method and a seed), executed in its own process so that its peak memory
is its own: pretraining, offline linear probe, kNN and the interpretability report.

Every stage writes its JSON into the run folder when it finishes and is skipped when that file
exists, so an interrupted run picks up where it stopped (pretraining itself resumes from its last
checkpoint through solo-learn's auto-resume). ``result.json`` is written last.

    python -m solo_bayesncl.benchmark.run_one RUN_DIR/spec.json
"""

from __future__ import annotations

import csv
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback

__all__ = ["LINEAR_CONFIG", "EpochTimer", "linear_probe_label", "run"]

LINEAR_CONFIG = "linear_sgd.yaml"
"""The linear-probe config of a preset that names none (``linear.config``): SGD with step decay.
The paper presets name ``linear.yaml``, the official probe of the NCL/BayesNCL papers."""


class EpochTimer(Callback):
    """Appends the wall time of every training epoch to a JSON list (kept across resumes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._start = 0.0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        times = json.loads(self.path.read_text()) if self.path.is_file() else []
        times.append(time.perf_counter() - self._start)
        self.path.write_text(json.dumps(times))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float) + "\n")
    tmp.replace(path)  # a stage's JSON never looks finished before it is


def _peak_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _last_value(metrics_csv: Path, column: str) -> float | None:
    value = None
    with open(metrics_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row.get(column):
                value = float(row[column])
    return value


def _compose(config_dir: Path, name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.2"):
        cfg = compose(config_name=name, overrides=overrides)
    OmegaConf.set_struct(cfg, False)
    return cfg


def _pretrain(spec: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    from solo_bayesncl.cli.pretrain import pretrain

    out = run_dir / "pretrain"
    overrides = spec["overrides"] + [
        f"seed={spec['seed']}",
        f"checkpoint.dir={out}",
        "auto_resume.enabled=True",
        "wandb.enabled=False",
    ]
    cfg = _compose(Path(spec["config_dir"]), f"{spec['method']}.yaml", overrides)
    start = time.perf_counter()
    pretrain(cfg, extra_callbacks=[EpochTimer(run_dir / "epoch_times.json")])
    ckpts = sorted((out / spec["method"]).glob("*/*.ckpt"), key=lambda p: p.stat().st_mtime)
    epoch_times = json.loads((run_dir / "epoch_times.json").read_text())
    return {
        "checkpoint": str(ckpts[-1]),
        "metrics_csv": str(ckpts[-1].parent / "metrics.csv"),
        "seconds_per_epoch": sum(epoch_times) / len(epoch_times),
        "epochs": len(epoch_times),
        "pretrain_wall_s": time.perf_counter() - start,
        "peak_memory_mb": _peak_memory_mb(),
        "online_linear_top1": _last_value(ckpts[-1].parent / "metrics.csv", "val_acc1"),
    }


def _linear(spec: dict[str, Any], run_dir: Path, ckpt: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from solo_bayesncl.checkpoints import load_checkpoint
    from solo_bayesncl.cli.linear import linear_eval

    trained = load_checkpoint(ckpt).cfg
    data = trained.data
    dataset = OmegaConf.select(trained, "data.offline_dataset", default=None) or data.dataset
    linear = spec["linear"]
    overrides = [
        f"pretrained_feature_extractor='{ckpt}'",
        f"data.dataset={dataset}",
        f"data.num_workers={data.num_workers}",
        f"data.fraction={OmegaConf.select(trained, 'data.fraction', default=-1)}",
        f"data.val_fraction={OmegaConf.select(trained, 'data.val_fraction', default=-1)}",
        f"data.augmentations.crop_size={trained.augmentations[0].crop_size}",
        f"seed={spec['seed']}",
        f"checkpoint.dir={run_dir / 'linear'}",
        "wandb.enabled=False",
        f"accelerator={trained.accelerator}",
        *linear.get("overrides", []),
    ]
    from solo_bayesncl.data.datasets import OFFLINE_DATASETS

    if dataset not in OFFLINE_DATASETS:
        overrides += [f"data.train_path={data.train_path}", f"data.val_path={data.val_path}"]
    for key in ("num_backgrounds", "background_seed"):  # fashion-mnist-scenes
        if OmegaConf.select(trained, f"data.{key}", default=None) is not None:
            overrides.append(f"++data.{key}={trained.data[key]}")
    # the preset's own values replace the config's; a step schedule then decays at 60% and 80%
    for key, name in (("max_epochs", "max_epochs"), ("batch_size", "optimizer.batch_size")):
        if key in linear:
            overrides.append(f"{name}={linear[key]}")
    if "lr" in linear:
        overrides.append(f"optimizer.lr={linear['lr']}")
    config_dir = Path(spec["config_dir"].replace("pretrain", "linear"))
    cfg = _compose(config_dir, linear.get("config", LINEAR_CONFIG), overrides)
    if "max_epochs" in linear and cfg.scheduler.name == "step":
        epochs = int(linear["max_epochs"])
        cfg.scheduler.lr_decay_steps = [int(epochs * 0.6), int(epochs * 0.8)]
    probe = linear_probe_label(linear.get("config", LINEAR_CONFIG), cfg)
    linear_eval(cfg)
    (metrics,) = sorted((run_dir / "linear" / "linear").glob("*/metrics.csv"))[-1:]
    return {
        "linear_top1": _last_value(metrics, "val_acc1"),
        "linear_metrics_csv": str(metrics),
        "linear_probe": probe,
    }


def linear_probe_label(config_name: str, cfg) -> str:
    """Which probe a run used, for the table: config file, optimizer, lr, schedule, epochs."""
    return (
        f"{config_name}: {cfg.optimizer.name} lr {cfg.optimizer.lr:g}, {cfg.scheduler.name}, "
        f"{cfg.max_epochs} epochs, batch {cfg.optimizer.batch_size}"
    )


def run(spec_path: Path) -> dict[str, Any]:
    """Runs every unfinished stage of the run described by ``spec_path``; returns its result."""
    spec = json.loads(spec_path.read_text())
    run_dir = spec_path.parent
    stages: dict[str, Any] = {}

    pretrain_json = run_dir / "pretrain.json"
    if not pretrain_json.is_file():
        _write_json(pretrain_json, _pretrain(spec, run_dir))
    stages["pretrain"] = json.loads(pretrain_json.read_text())
    ckpt = stages["pretrain"]["checkpoint"]

    linear_json = run_dir / "linear.json"
    if not linear_json.is_file():
        _write_json(linear_json, _linear(spec, run_dir, ckpt))
    stages["linear"] = json.loads(linear_json.read_text())

    knn_json = run_dir / "knn.json"
    if not knn_json.is_file():
        from solo_bayesncl.cli.knn import knn_eval

        knn = spec["knn"]
        k = int(knn.get("k", 20))
        results = knn_eval(
            ckpt, ks=(k,), temperature=float(knn.get("temperature", 0.07)), num_workers=2
        )
        _write_json(knn_json, {"knn_top1": results[f"knn_top1_k{k}"], "k": k})
    stages["knn"] = json.loads(knn_json.read_text())

    report_dir = run_dir / "report"
    protocol = spec.get("protocol", "standard")
    report_json = report_dir / "metrics.json"
    if not report_json.is_file() or (
        protocol == "paper" and "metrics_paper" not in json.loads(report_json.read_text())
    ):
        from solo_bayesncl.evaluation.report import write_report

        write_report(
            ckpt,
            report_dir,
            overwrite=True,
            progress=False,
            protocol=protocol,
            **spec.get("report", {}),
        )
    report = json.loads(report_json.read_text())

    background_json = run_dir / "background.json"
    if report.get("dataset") == "fashion-mnist-scenes" and not background_json.is_file():
        from solo_bayesncl.evaluation.background import background_measures

        _write_json(background_json, background_measures(ckpt))

    result = {
        "method": spec["method"],
        "variant": spec.get("variant", spec["method"]),
        "seed": spec["seed"],
        "run_key": spec["run_key"],
        **{k: v for k, v in stages["pretrain"].items() if k not in ("metrics_csv",)},
        "pretrain_metrics_csv": stages["pretrain"]["metrics_csv"],
        "linear_top1": stages["linear"]["linear_top1"],
        "linear_probe": stages["linear"].get("linear_probe"),
        "knn_top1": stages["knn"]["knn_top1"],
        "metrics": report["metrics"],
        "gate_open_rate": report.get("gate_open_rate"),
    }
    if "metrics_paper" in report:
        result["metrics_paper"] = report["metrics_paper"]
    if background_json.is_file():
        result["background"] = json.loads(background_json.read_text())
    _write_json(run_dir / "result.json", result)
    return result


if __name__ == "__main__":
    run(Path(sys.argv[1]))

"""The stages of a benchmark run, each from its spec to the JSON it records: pretraining, the
offline linear probe, kNN, the interpretability report and, on the scenes data, the background
measures. A stage that ends short of its target raises :class:`StageUnfinished`.

kNN and the report share one pass over the validation images (:class:`ValidationPass`). The
linear probe validates once, after its last epoch (the accuracy the table reads; validation
draws nothing from the training's random stream, so the figure is the same)."""

from __future__ import annotations

import json
import resource
import signal
from pathlib import Path
from typing import Any

import torch
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from lightning.pytorch.trainer.states import TrainerStatus
from omegaconf import OmegaConf

from solo_bayesncl.benchmark.callbacks import stage_callbacks
from solo_bayesncl.benchmark.presets import RunOrder
from solo_bayesncl.benchmark.process import Terminated
from solo_bayesncl.benchmark.sittings import epoch_timing, merge_metrics
from solo_bayesncl.config.settings import RunSpec, run_spec
from solo_bayesncl.core.threads import CHECKPOINT_KEY
from solo_bayesncl.evaluation import knn
from solo_bayesncl.evaluation.knn import knn_eval
from solo_bayesncl.evaluation.report import (
    PreparedReport,
    ReportOptions,
    prepare_report,
    write_report,
)
from solo_bayesncl.io.checkpoints import load_checkpoint
from solo_bayesncl.training.linear import linear_eval
from solo_bayesncl.training.pretrain import pretrain
from solo_bayesncl.training.summary import csv_log_dir, last_logged_value, stopping_signal

__all__ = [
    "StageUnfinished",
    "ValidationPass",
    "check_finished",
    "knn_stage",
    "linear_stage",
    "pretrain_other_rank",
    "pretrain_stage",
    "report_stage",
    "validate_at_end_only",
]

LINEAR_CONFIG = "linear_sgd.yaml"
"""The linear-probe config of a preset that names none (``linear.config``): SGD, step decay."""


class StageUnfinished(RuntimeError):
    """A stage ended without reaching its target; nothing of it is recorded."""


class ValidationPass:
    """The one pass of a checkpoint over its validation images that kNN and the report share
    (:func:`~solo_bayesncl.evaluation.report.prepare_report` with the backbone features), made
    when the first stage asks, dropped once the report is written; shared only when the preset's
    report options leave the pass the same."""

    def __init__(self, options: ReportOptions, ckpt: str) -> None:
        self.ckpt = ckpt
        self.options = options
        self._prepared: PreparedReport | None = None

    @property
    def shared_with_knn(self) -> bool:
        """Whether the report's pass is the one kNN would make over the validation set."""
        options = self.options
        return (
            options.dataset is None
            and options.max_images is None
            and options.device is None
            and options.batch_size == knn.BATCH_SIZE
        )

    def prepared(self, with_backbone: bool = False) -> PreparedReport:
        """The report's pass, made now unless an earlier stage of this sitting made it."""
        if self._prepared is None or (
            with_backbone and self._prepared.data.backbone_features is None
        ):
            self._prepared = prepare_report(
                self.ckpt, self.options, progress=False, with_backbone=with_backbone
            )
        return self._prepared

    def release(self) -> None:
        """Drops the pass (its features and thumbnails) once nothing reads it any more."""
        self._prepared = None


def peak_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def compose(config_dir: Path, name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.2"):
        cfg = hydra_compose(config_name=name, overrides=overrides)
    OmegaConf.set_struct(cfg, False)
    return cfg


def check_finished(trainer, what: str) -> None:
    """Raises KeyboardInterrupt (Lightning swallowed a Ctrl-C), :class:`Terminated` (SIGTERM) or
    StageUnfinished (stopped before ``max_epochs``): never reported as finished."""
    stopped = stopping_signal(trainer)
    if stopped == signal.SIGTERM:
        raise Terminated
    if stopped is not None:
        raise KeyboardInterrupt
    if trainer.state.status != TrainerStatus.FINISHED or trainer.current_epoch < trainer.max_epochs:
        raise StageUnfinished(
            f"{what} stopped at epoch {trainer.current_epoch} of {trainer.max_epochs} "
            f"(status {trainer.state.status.value})"
        )


def _pretrain_cfg(spec: RunOrder, run_dir: Path):
    """The pretraining config of a run: the preset's overrides, then the benchmark's own."""
    overrides = spec.overrides + [
        f"seed={spec.seed}",
        f"checkpoint.dir={run_dir / 'pretrain'}",
        "++checkpoint.enabled=True",
        "++checkpoint.frequency=1",  # the last epoch must be saved
        "++auto_resume.enabled=True",
        "++auto_resume.max_hours=1000000",
        "++wandb.enabled=False",
        "++enable_progress_bar=False",  # the benchmark shows progress; the log stays readable
        *_threads_override(spec),
    ]
    return compose(Path(spec.config_dir), f"{spec.method}.yaml", overrides)


def _threads_override(spec: RunOrder) -> list[str]:
    """The benchmark's one thread count for every run (``threads`` of ``spec.json``)."""
    return [f"++threads={spec.threads}"] if spec.threads is not None else []


def pretrain_stage(spec: RunOrder, run_dir: Path, status) -> dict[str, Any]:
    """Pretraining to ``max_epochs``, resumed from the run's last readable checkpoint. With
    ``devices`` > 1 it is one Lightning DDP job started from this process (rank 0)."""
    cfg = _pretrain_cfg(spec, run_dir)
    # no epoch yet: a resumed run learns its own once the checkpoint is restored
    epochs = run_spec(cfg).trainer.max_epochs
    status.update(stage="pretrain", epochs=int(epochs), batch=0, batches=None)
    trainer = pretrain(cfg, extra_callbacks=stage_callbacks(run_dir, status, "pretrain"))
    if torch.distributed.is_initialized():  # a multi-process job, over: the later stages run in
        torch.distributed.destroy_process_group()  # this process alone, with no group to sync
    check_finished(trainer, "pretraining")
    checkpointer = next(
        (cb for cb in trainer.callbacks if type(cb).__name__ == "Checkpointer"), None
    )
    # this sitting's last checkpoint, or the one it resumed from when that was already final
    ckpt = getattr(checkpointer, "last_ckpt", None) or trainer.ckpt_path
    if ckpt is None:
        raise StageUnfinished("pretraining finished without a checkpoint")
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    saved_epoch = saved.get("epoch", -1)
    if saved_epoch + 1 < trainer.max_epochs:
        raise StageUnfinished(
            f"the last checkpoint {ckpt} is of epoch {saved_epoch + 1}, not {trainer.max_epochs}"
        )
    metrics = merge_metrics(run_dir, str(csv_log_dir(trainer)), run_dir / "pretrain_metrics.csv")
    return {
        "checkpoint": str(Path(ckpt).resolve()),
        "metrics_csv": str(metrics),
        **epoch_timing(run_dir, "pretrain", trainer.max_epochs),
        "epochs": int(trainer.max_epochs),
        "threads": saved.get(CHECKPOINT_KEY),  # the count it trained with (core.threads)
        "peak_memory_mb": peak_memory_mb(),
        "online_linear_top1": last_logged_value(metrics, "val_acc1"),
        "probe_top1": last_logged_value(metrics, "interp/probe_top1"),
    }


def pretrain_other_rank(spec: RunOrder, run_dir: Path) -> None:
    """Rank 1.. of a multi-process pretraining: trains its part and records nothing."""
    pretrain(
        _pretrain_cfg(spec, run_dir),
        extra_callbacks=stage_callbacks(run_dir, None, "pretrain"),
    )


def linear_stage(spec: RunOrder, run_dir: Path, ckpt: str, status) -> dict[str, Any]:
    trained = load_checkpoint(ckpt).spec
    linear = spec.linear
    # the data settings (dataset, paths, fractions, crop, normalisation, backgrounds) follow the
    # checkpoint through linear_eval's inherit_from_checkpoint (config.linear); these are the run's own
    overrides = [
        f"pretrained_feature_extractor='{ckpt}'",
        f"data.num_workers={trained.data.num_workers}",
        f"seed={spec.seed}",
        f"checkpoint.dir={run_dir / 'linear'}",
        "wandb.enabled=False",
        "++enable_progress_bar=False",
        f"accelerator={trained.trainer.accelerator}",
        *linear.get("overrides", []),
        "devices=1",  # the probe runs in this process (pretraining may have used several)
        *_threads_override(spec),
    ]
    # the preset's own values replace the config's; a step schedule then decays at 60% and 80%
    for key, name in (("max_epochs", "max_epochs"), ("batch_size", "optimizer.batch_size")):
        if key in linear:
            overrides.append(f"{name}={linear[key]}")
    if "lr" in linear:
        overrides.append(f"optimizer.lr={linear['lr']}")
    config_dir = spec.linear_config_dir
    config_name = linear.get("config", LINEAR_CONFIG)
    cfg = compose(Path(config_dir), config_name, overrides)  # linear_eval's, handed on
    plan = run_spec(cfg)
    if "max_epochs" in linear and plan.optimizer.scheduler == "step":
        epochs = int(linear["max_epochs"])
        cfg.scheduler.lr_decay_steps = [int(epochs * 0.6), int(epochs * 0.8)]
    validate_at_end_only(cfg, plan)
    probe = linear_probe_label(config_name, plan)
    status.update(stage="linear", epochs=int(plan.trainer.max_epochs), batch=0, batches=None)
    trainer = linear_eval(
        cfg, overrides, extra_callbacks=stage_callbacks(run_dir, status, "linear")
    )
    check_finished(trainer, "linear evaluation")
    metrics = csv_log_dir(trainer) / "metrics.csv"  # this attempt's own log
    top1 = last_logged_value(metrics, "val_acc1")
    if top1 is None:
        raise StageUnfinished(f"linear evaluation logged no val_acc1 in {metrics}")
    return {"linear_top1": top1, "linear_metrics_csv": str(metrics), "linear_probe": probe}


def validate_at_end_only(cfg, spec: RunSpec) -> None:
    """The probe validates once, after its last epoch, with no sanity check; a ``reduce``
    schedule, which reads the validation loss, keeps validating every epoch."""
    if spec.optimizer.scheduler != "reduce":
        epochs = int(spec.trainer.max_epochs)  # type: ignore[arg-type]  # a probe has one
        cfg.merge_with({"check_val_every_n_epoch": epochs, "num_sanity_val_steps": 0})


def linear_probe_label(config_name: str, spec: RunSpec) -> str:
    """Which probe a run used, for the table: config file, optimizer, lr, schedule, epochs."""
    opt = spec.optimizer
    return (
        f"{config_name}: {opt.name} lr {opt.lr:g}, {opt.scheduler}, "
        f"{spec.trainer.max_epochs} epochs, batch {opt.batch_size}"
    )


def knn_stage(
    spec: RunOrder, ckpt: str, status, shared: ValidationPass | None = None
) -> dict[str, Any]:
    """kNN top-1 on backbone features, from the report's pass when ``shared``."""
    status.update(stage="knn")
    k = int(spec.knn.get("k", knn.K))
    checkpoint, options = ckpt, {}
    if shared is not None and shared.shared_with_knn:
        prepared = shared.prepared(with_backbone=True)
        checkpoint = prepared.inputs.loaded  # read once
        options = {
            "model": prepared.inputs.model,
            "val_features": (
                prepared.data.backbone_features,
                torch.from_numpy(prepared.data.labels),
            ),
        }
    results = knn_eval(
        checkpoint,
        ks=(k,),
        temperature=float(spec.knn.get("temperature", knn.TEMPERATURE)),
        **options,
    )
    return {"knn_top1": results[f"knn_top1_k{k}"], "k": k}


def report_stage(
    spec: RunOrder, run_dir: Path, ckpt: str, status, shared: ValidationPass | None = None
) -> dict[str, Any]:
    """The interpretability report, from ``shared``'s pass when given."""
    status.update(stage="report")
    report_dir = run_dir / "report"
    write_report(
        ckpt,
        report_dir,
        spec.report,
        overwrite=True,
        progress=False,
        prepared=shared.prepared() if shared is not None else None,
    )
    if shared is not None:
        shared.release()
    report = json.loads((report_dir / "metrics.json").read_text())
    return {
        "metrics": report["metrics"],
        "metrics_paper": report.get("metrics_paper"),
        "gate_open_rate": report.get("gate_open_rate"),
        "dataset": report.get("dataset"),
        "report_dir": str(report_dir),
    }

"""Self-supervised pretraining through solo-learn's pipeline, for any method in its registry.

``solo-bayesncl-pretrain --config-name bayesncl.yaml`` (or ``python main_pretrain.py ...`` in a
checkout) runs :func:`pretrain` on a Hydra config composed from the shipped
``scripts/pretrain/cifar`` folder (``--config-path`` picks another, e.g.
``scripts/pretrain/imagenet-100``).
solo-learn provides the backbones, augmentations, data loading (DALI included), LARS, schedulers,
the online linear and kNN evaluation, checkpointing and auto-resume; this module adds what its own
script lacks here: configs that follow the machine (:mod:`solo_bayesncl.runtime`), the offline
``fashion-mnist`` dataset and early data checks (:mod:`solo_bayesncl.data.datasets`), a CSV log of
every run beside its checkpoints, and wandb that never asks for a login unless switched on.
"""

from __future__ import annotations

from pathlib import Path

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.registration import require_solo_learn

__all__ = ["main", "pretrain", "prepare_pretrain_cfg"]


def prepare_pretrain_cfg(
    cfg: omegaconf.DictConfig, check_data: bool = True
) -> omegaconf.DictConfig:
    """Every check and default that must hold before a model is built.

    Resolves accelerator/devices/precision, the dataset (``fashion-mnist`` included), runs
    solo-learn's ``parse_cfg`` and the method's own ``add_and_assert_specific_cfg``, and checks
    the optimizer, scheduler and backbone names and the ``interpretability`` section, so that a
    bad key fails here with a message naming it.
    """
    require_solo_learn("main_pretrain.py")
    from solo_bayesncl import registration

    registration.register()
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS
    from solo.methods.base import BaseMethod

    from solo_bayesncl.config import resolve_with_solo
    from solo_bayesncl.data.pipelines import resolve_augment_on
    from solo_bayesncl.evaluation.callback import check_interpretability_cfg
    from solo_bayesncl.methods.config_checks import (
        check_method_kwargs,
        check_solo_names,
        check_upstream_method_kwargs,
    )

    OmegaConf.set_struct(cfg, False)
    method = OmegaConf.select(cfg, "method", default=None)
    if method not in METHODS:
        raise ValueError(
            f"method={method!r} is not a solo-learn method; allowed values: {', '.join(sorted(METHODS))}"
        )
    check_method_kwargs(cfg, METHODS[method])  # no silently ignored (misspelt) key
    check_solo_names(cfg, BaseMethod._OPTIMIZERS, BaseMethod._SCHEDULERS, BaseMethod._BACKBONES)
    cfg = resolve_with_solo(cfg, parse_cfg, check_data)
    cfg = resolve_augment_on(cfg)
    cfg = METHODS[method].add_and_assert_specific_cfg(cfg)
    check_upstream_method_kwargs(cfg)
    check_interpretability_cfg(cfg)
    return cfg


def pretrain(
    cfg: omegaconf.DictConfig, extra_callbacks: list | None = None, prepared: bool = False
):
    """Trains ``cfg.method`` as solo-learn's pretraining script would; returns the Trainer.

    ``extra_callbacks`` are added to the Trainer's (e.g. the benchmark's epoch timer);
    ``prepared`` says ``cfg`` already went through :func:`prepare_pretrain_cfg`.
    """
    if not prepared:
        cfg = prepare_pretrain_cfg(cfg)

    import torch
    from lightning.pytorch import seed_everything
    from lightning.pytorch.callbacks import LearningRateMonitor
    from solo.utils.misc import make_contiguous

    from solo_bayesncl.auto_resume import decide_job_run
    from solo_bayesncl.data.datasets import build_val_loader
    from solo_bayesncl.data.pipelines import pretrain_fit_data
    from solo_bayesncl.evaluation.callback import build_interpretability_callback
    from solo_bayesncl.models import build_method
    from solo_bayesncl.trainer import fit_job

    seed_everything(cfg.seed)
    model = build_method(cfg)
    make_contiguous(model)
    if not cfg.performance.disable_channel_last:
        model = model.to(memory_format=torch.channels_last)

    val_loader = build_val_loader(cfg)
    if cfg.data.format == "dali":
        from solo_bayesncl.data.dali_modules import build_pretrain_dali_datamodule

        datamodule = build_pretrain_dali_datamodule(cfg)
        datamodule.val_dataloader = lambda: val_loader
        fit_data = {"datamodule": datamodule}
    else:  # solo-learn's per-image transforms or the batched in-memory path (data.augment_on)
        fit_data = pretrain_fit_data(cfg, val_loader)

    run_root = Path(cfg.checkpoint.dir) / cfg.method
    explicit_ckpt = cfg.resume_from_checkpoint
    if explicit_ckpt is not None:
        del cfg.resume_from_checkpoint
    # one decision for the whole job, whatever the number of processes; the whole resolved config
    # must match an earlier sitting's, not solo-learn's dozen keys
    run = decide_job_run(
        OmegaConf.to_container(cfg),
        run_root,
        resume=bool(cfg.auto_resume.enabled),
        max_hours=cfg.auto_resume.max_hours,
        explicit_ckpt=explicit_ckpt,
    )

    callbacks: list = []
    interpretability = build_interpretability_callback(cfg, val_loader)
    if interpretability is not None:
        callbacks.append(interpretability)
    callbacks.append(LearningRateMonitor(logging_interval="step"))
    callbacks.extend(extra_callbacks or [])
    return fit_job(cfg, run, run_root, model, callbacks, **fit_data)


def _run(cfg: omegaconf.DictConfig) -> None:
    from solo_bayesncl.cli.console import input_errors_until_fit, print_run_summary

    with input_errors_until_fit("solo-bayesncl-pretrain") as callbacks:
        cfg = prepare_pretrain_cfg(cfg)
        trainer = pretrain(cfg, extra_callbacks=callbacks, prepared=True)
    print_run_summary(f"pretraining {cfg.name}", trainer)


def main() -> int:
    """``solo-bayesncl-pretrain`` / ``python main_pretrain.py``: Hydra overrides on ``sys.argv``."""
    from solo_bayesncl.cli.console import hydra_entry_point
    from solo_bayesncl.shipped_configs import pretrain_config_dir

    return hydra_entry_point(
        _run, pretrain_config_dir("cifar"), "bayesncl", "solo-bayesncl-pretrain"
    )

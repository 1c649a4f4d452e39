"""Self-supervised pretraining through solo-learn's pipeline, for any method in its registry.

``solo-bayesncl-pretrain --config-name bayesncl.yaml`` (or ``python main_pretrain.py ...`` in a
checkout) runs :func:`pretrain` on a Hydra config composed from the shipped
``scripts/pretrain/cifar`` folder (``--config-path`` picks another, e.g.
``scripts/pretrain/imagenet-100``).
solo-learn provides the backbones, augmentations, data loading (DALI included), LARS, schedulers,
the online linear and kNN evaluation, checkpointing and auto-resume; this module adds what its own
script lacks here: configs that follow the machine (:mod:`solo_bayesncl.config.runtime`), the offline
``fashion-mnist`` dataset and early data checks (:mod:`solo_bayesncl.data.datasets`), a CSV log of
every run beside its checkpoints, and wandb that never asks for a login unless switched on.
"""

from __future__ import annotations

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.config.checks import check_solo_names
from solo_bayesncl.config.settings import resolve_with_solo, run_settings
from solo_bayesncl.data.pipelines import pretrain_fit_data, resolve_augment_on
from solo_bayesncl.host.availability import require_solo_learn
from solo_bayesncl.host.models import build_method
from solo_bayesncl.host.registration import register
from solo_bayesncl.training.auto_resume import decide_job_run
from solo_bayesncl.training.fit import fit, seed_and_layout

__all__ = ["pretrain", "prepare_pretrain_cfg"]


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
    register()
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS
    from solo.methods.base import BaseMethod

    # the methods package imports solo-learn (it registers its classes), the callback Lightning
    from solo_bayesncl.methods.keys import check_method_kwargs, check_upstream_method_kwargs
    from solo_bayesncl.training.callback import check_interpretability_cfg

    OmegaConf.set_struct(cfg, False)
    method = OmegaConf.select(cfg, "method", default=None)
    if method not in METHODS:
        raise ValueError(
            f"method={method!r} is not a solo-learn method; allowed values: {', '.join(sorted(METHODS))}"
        )
    # no silently ignored (misspelt) key
    check_method_kwargs(method, OmegaConf.select(cfg, "method_kwargs", default=None))
    check_solo_names(cfg, BaseMethod._OPTIMIZERS, BaseMethod._SCHEDULERS, BaseMethod._BACKBONES)
    cfg = resolve_with_solo(cfg, parse_cfg, check_data)
    cfg = resolve_augment_on(cfg)
    cfg = METHODS[method].add_and_assert_specific_cfg(cfg)
    check_upstream_method_kwargs(cfg.method, cfg.method_kwargs)
    check_interpretability_cfg(cfg)
    run_settings(cfg)  # performance.compile=True needs a C++ compiler on the CPU
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
    from lightning.pytorch.callbacks import LearningRateMonitor

    from solo_bayesncl.training.callback import build_interpretability_callback  # Lightning

    settings = run_settings(cfg)  # the config read once; solo-learn's classes get cfg itself
    model = seed_and_layout(settings.seed, settings.performance, lambda: build_method(cfg))
    explicit_ckpt = cfg.resume_from_checkpoint
    if explicit_ckpt is not None:
        del cfg.resume_from_checkpoint
    # one decision for the whole job, whatever the number of processes; the whole resolved config
    # must match an earlier sitting's, not solo-learn's dozen keys
    run = decide_job_run(
        OmegaConf.to_container(cfg),
        settings.run_root,
        resume=settings.auto_resume,
        max_hours=settings.max_hours,
        explicit_ckpt=explicit_ckpt,
        shapes={k: tuple(v.shape) for k, v in model.state_dict().items()},
    )

    def callbacks(val_loader) -> list:
        interpretability = build_interpretability_callback(cfg, val_loader)
        return [
            *([interpretability] if interpretability is not None else []),
            LearningRateMonitor(logging_interval="step"),
            *(extra_callbacks or []),
        ]

    return fit(
        cfg,
        settings,
        model,
        settings.run_root,
        dali_datamodule=_dali_datamodule,
        fit_data=pretrain_fit_data,  # per-image or batched augmentation (data.augment_on)
        run=run,
        callbacks=callbacks,
        resumable=True,  # saves within epochs, resumes there as if never stopped
        compile_backbone=True,  # performance.compile decides
    )


def _dali_datamodule(cfg: omegaconf.DictConfig):
    from solo_bayesncl.data.dali_modules import build_pretrain_dali_datamodule

    return build_pretrain_dali_datamodule(cfg)

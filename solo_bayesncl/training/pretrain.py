"""Self-supervised pretraining through solo-learn's pipeline, for any method in its registry.

solo-learn provides the models, data, optimisation and checkpointing; this adds configs that
follow the machine, early checks, the offline datasets and the training skeleton
(:mod:`solo_bayesncl.training.fit`).
"""

from __future__ import annotations

import omegaconf
from omegaconf import OmegaConf

from solo_bayesncl.config.checks import check_solo_names
from solo_bayesncl.config.settings import RunSpec, resolve_with_solo, run_spec
from solo_bayesncl.data.pipelines import pretrain_fit_data
from solo_bayesncl.host.availability import require_solo_learn
from solo_bayesncl.host.models import build_method
from solo_bayesncl.host.registration import register
from solo_bayesncl.io.files import require_writable
from solo_bayesncl.methods.keys import checked_method
from solo_bayesncl.training.auto_resume import decide_job_run
from solo_bayesncl.training.fit import fit, seed_and_layout

__all__ = ["pretrain", "prepare_pretrain", "train_pretrain"]


def prepare_pretrain(cfg: omegaconf.DictConfig, check_data: bool = True) -> RunSpec:
    """Every check and default that must hold before a model is built, so that a bad key fails
    here naming it; then the config read once into its spec."""
    require_solo_learn("main_pretrain.py")
    register()
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS
    from solo.methods.base import BaseMethod

    OmegaConf.set_struct(cfg, False)
    method = checked_method(cfg, METHODS)  # no silently ignored (misspelt) key
    check_solo_names(cfg, BaseMethod._OPTIMIZERS, BaseMethod._SCHEDULERS, BaseMethod._BACKBONES)
    cfg = resolve_with_solo(cfg, parse_cfg, check_data, pretraining=True)
    cfg = METHODS[method].add_and_assert_specific_cfg(cfg)  # solo-learn's defaults
    return run_spec(cfg, pretraining=True)  # the method's settings parsed, once


def pretrain(cfg: omegaconf.DictConfig, extra_callbacks: list | None = None):
    """:func:`prepare_pretrain`, then :func:`train_pretrain`; returns the Trainer."""
    return train_pretrain(prepare_pretrain(cfg), extra_callbacks)


def train_pretrain(spec: RunSpec, extra_callbacks: list | None = None):
    """Trains the method of a prepared ``spec`` (with ``extra_callbacks``); returns the Trainer."""
    from lightning.pytorch.callbacks import LearningRateMonitor

    from solo_bayesncl.training.callback import build_interpretability_callback  # Lightning

    # the run folder, logs and checkpoints go under checkpoint.dir (the current folder by
    # default): a read-only place is refused here, not by Lightning once training runs
    require_writable(spec.checkpoint.run_root, what="checkpoint.dir")
    model = seed_and_layout(
        spec.trainer.seed,
        spec.trainer.performance,
        lambda: build_method(
            spec.method.name, spec.solo, spec.method.small_stem, settings=spec.method.settings
        ),
    )
    run = decide_job_run(
        spec.fingerprint_source,
        spec.checkpoint.run_root,
        resume=spec.checkpoint.auto_resume,
        max_hours=spec.checkpoint.max_hours,
        explicit_ckpt=spec.checkpoint.resume_from,
        shapes={k: tuple(v.shape) for k, v in model.state_dict().items()},
    )

    def callbacks(val_loader) -> list:
        interpretability = build_interpretability_callback(
            spec.interpretability, spec.data, spec.optimizer.batch_size, val_loader
        )
        return [
            *([interpretability] if interpretability is not None else []),
            LearningRateMonitor(logging_interval="step"),
            *(extra_callbacks or []),
        ]

    return fit(
        spec,
        model,
        dali_datamodule=_dali_datamodule,
        # per-image or batched augmentation (data.augment_on): solo-learn's transforms
        fit_data=lambda spec, val_loader: pretrain_fit_data(
            spec.data, spec.solo, spec.trainer.seed or 0, spec.optimizer.batch_size, val_loader
        ),
        run=run,
        callbacks=callbacks,
        pretraining=True,
    )


def _dali_datamodule(spec: RunSpec):
    from solo_bayesncl.data.dali_modules import build_pretrain_dali_datamodule

    return build_pretrain_dali_datamodule(spec.data, spec.optimizer.batch_size, spec.solo)

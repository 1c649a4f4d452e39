"""The one training skeleton that pretraining and linear evaluation share: seed, model layout,
the validation loader, DALI or in-memory training data, loggers, checkpoints, callbacks, then
``Trainer.fit`` for the job's one run (:class:`~solo_bayesncl.training.auto_resume.JobRun`,
decided once however many processes train).

What differs between the two (the model, the training data, resuming) is passed in; see
:func:`solo_bayesncl.training.pretrain.pretrain` and
:func:`solo_bayesncl.training.linear.linear_eval`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from solo_bayesncl.config.runtime import PerformanceSettings
from solo_bayesncl.config.settings import RunSpec
from solo_bayesncl.core.distributed import launched_as_rank_zero
from solo_bayesncl.core.validation import first_line
from solo_bayesncl.data.datasets import build_val_loader
from solo_bayesncl.training.auto_resume import JobRun, shared_with_launched_processes
from solo_bayesncl.training.channels_last_max_pool import max_pools_via_channels_last
from solo_bayesncl.training.compiled import compile_training_forward
from solo_bayesncl.training.resumable import resumable_fit
from solo_bayesncl.training.small_map_convs import small_map_convs_as_products
from solo_bayesncl.training.summary import drop_folder_without_checkpoint
from solo_bayesncl.training.trainer import (
    PeersNotMet,
    build_loggers,
    build_trainer,
    checkpoint_callbacks,
    job_run_agreement,
    per_rank_random_streams,
)

__all__ = ["fit", "seed_and_layout", "train_batches_per_process"]


def seed_and_layout(
    seed: int | None, performance: PerformanceSettings, build: Callable[[], nn.Module]
) -> nn.Module:
    """Seeds every generator with ``seed``, then builds the model, gives it solo-learn's
    memory layout (contiguous, channels-last unless ``performance.disable_channel_last``) and,
    with ``performance.small_map_convs``, computes its convolutions on maps of a few pixels as
    matrix products (:mod:`solo_bayesncl.training.small_map_convs`) and, with
    ``performance.channels_last_max_pool`` (a contiguous model only), its max-pooling with the
    channels-last kernel (:mod:`solo_bayesncl.training.channels_last_max_pool`)."""
    from lightning.pytorch import seed_everything
    from solo.utils.misc import make_contiguous

    seed_everything(seed)
    model = build()
    make_contiguous(model)
    if performance.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if performance.small_map_convs:
        small_map_convs_as_products(model)
    if performance.channels_last_max_pool:
        max_pools_via_channels_last(model)
    return model


def train_batches_per_process(data: dict[str, Any], processes: int, dali: bool) -> int | None:
    """The training batches of an epoch in each process, from the ``Trainer.fit`` arguments: the
    training loader's length (a data module's, except DALI's, which is built inside the fit)
    over the ``processes`` (``len(devices) * num_nodes``), rounded down; None when unknown."""
    if "train_dataloaders" in data:
        loader = data["train_dataloaders"]
    elif not dali and "datamodule" in data:
        loader = data["datamodule"].train_dataloader()
    else:
        return None
    try:
        batches = len(loader)
    except TypeError:  # an iterable without a length
        return None
    return batches // processes


def fit(
    spec: RunSpec,
    model: nn.Module,
    *,
    dali_datamodule: Callable[[RunSpec], Any],
    fit_data: Callable[[RunSpec, DataLoader | None], dict[str, Any]],
    run: JobRun,
    callbacks: Callable[[DataLoader | None], list] = lambda val_loader: [],
    val_transform: Callable | None = None,
    resumable: bool = False,
    compile_backbone: bool = False,
):
    """Trains ``model`` on the data of ``spec`` (the run's config read once,
    :func:`~solo_bayesncl.config.settings.run_spec`); returns the Trainer.

    With ``data.format=dali`` the training data is ``dali_datamodule(spec)`` (solo-learn's DALI
    pipeline) validated on this project's loader, else ``fit_data(spec, val_loader)`` gives the
    ``Trainer.fit`` keyword arguments. Logs and checkpoints go under ``checkpoint.run_root``, in
    the folder
    of ``run`` (resumed from ``run.ckpt_path`` when it has one). The callbacks are the run
    agreement between processes, the per-rank random streams, solo-learn's Checkpointer
    (``checkpoint.enabled``), then ``callbacks(val_loader)``. A ``resumable`` fit (pretraining)
    also saves within epochs and resumes there as if never stopped
    (:mod:`solo_bayesncl.training.resumable`, last, so that its seeding comes right before each
    batch is drawn). With ``compile_backbone`` (pretraining), ``performance.compile`` decides
    whether the backbone's training forward is compiled (:mod:`solo_bayesncl.training.compiled`). Lightning's launcher starts the other processes
    inside ``fit``, which therefore runs with ``run`` in the environment.

    An interrupted fit (Ctrl-C, or SIGTERM, which Lightning turns into an exception at the next
    batch) returns its Trainer too, ``trainer.interrupted`` set
    (:func:`~solo_bayesncl.training.summary.stopping_signal` says which signal); its run folder
    is removed when no checkpoint is in it
    (:func:`~solo_bayesncl.training.summary.drop_folder_without_checkpoint`). A job of several
    processes says how long they wait for each other
    (``distributed.timeout_s``) and raises
    :class:`~solo_bayesncl.training.trainer.PeersNotMet` when they do not all connect in time.
    """
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    machine, checkpoint = spec.trainer, spec.checkpoint
    dali = spec.data.format == "dali"
    val_loader = build_val_loader(
        spec.data, spec.optimizer.batch_size, val_transform, machine.processes
    )
    if dali:
        datamodule = dali_datamodule(spec)
        datamodule.val_dataloader = lambda: val_loader  # solo-learn's DALI module has none
        data = {"datamodule": datamodule}
    else:
        data = fit_data(spec, val_loader)
    own = list(callbacks(val_loader))  # checked with the data, before any logger is made
    train_batches = train_batches_per_process(data, machine.processes, dali)
    if compile_backbone and machine.performance.compile:
        compile_training_forward(model.backbone)
        if launched_as_rank_zero():
            print(
                "performance.compile: the backbone's training forward is compiled "
                "(torch.compile); the first steps take longer while it compiles",
                flush=True,
            )
    trainer = build_trainer(
        machine,
        build_loggers(machine, checkpoint.run_root, run),
        [
            job_run_agreement(run),
            per_rank_random_streams(),
            *checkpoint_callbacks(checkpoint, machine.name, spec.solo, within_epochs=resumable),
            *own,
            *([resumable_fit(int(machine.seed))] if resumable else []),
        ],
        train_batches=train_batches,
    )
    if machine.processes > 1 and launched_as_rank_zero():
        print(
            f"distributed: the job's {machine.processes} processes wait up to "
            f"{machine.peer_timeout_s:g} s for each other (distributed.timeout_s)",
            flush=True,
        )
    # Lightning stops a fit on SIGTERM with an exception; the trainer says it was interrupted
    with shared_with_launched_processes(run), contextlib.suppress(SIGTERMException):
        try:
            trainer.fit(model, ckpt_path=run.ckpt_path, **data)
        except torch.distributed.DistStoreError as err:
            raise PeersNotMet(
                f"the job's {machine.processes} processes did not all connect within "
                f"{machine.peer_timeout_s:g} s ({first_line(err)}); start the processes of every "
                "node, or give them longer with distributed.timeout_s"
            ) from None
        except Exception:
            raise
        except BaseException:  # a stop (the benchmark's SIGTERM, Lightning's), not a failure
            drop_folder_without_checkpoint(trainer, checkpoint.enabled)
            raise
    drop_folder_without_checkpoint(trainer, checkpoint.enabled)
    return trainer

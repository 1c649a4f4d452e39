"""The training skeleton that pretraining and linear evaluation share: seed, model layout, the
validation loader, training data, loggers, checkpoints, callbacks, then ``Trainer.fit`` for the
job's one run (:class:`~solo_bayesncl.training.auto_resume.JobRun`). What differs between the two
is passed in."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from solo_bayesncl.config.runtime import PerformanceSettings
from solo_bayesncl.config.settings import RunSpec, with_threads
from solo_bayesncl.core.distributed import launched_as_rank_zero
from solo_bayesncl.core.threads import CHECKPOINT_KEY, apply_threads, resumed_threads
from solo_bayesncl.core.validation import first_line
from solo_bayesncl.data.datasets import build_val_loader
from solo_bayesncl.training.auto_resume import JobRun, shared_with_launched_processes
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
    stop_together,
)

__all__ = ["fit", "run_threads", "seed_and_layout", "train_batches_per_process"]


def seed_and_layout(
    seed: int | None, performance: PerformanceSettings, build: Callable[[], nn.Module]
) -> nn.Module:
    """Seeds every generator with ``seed``, then builds the model and gives it solo-learn's
    memory layout and the layer swaps ``performance`` asks for."""
    from lightning.pytorch import seed_everything
    from solo.utils.misc import make_contiguous

    seed_everything(seed)
    model = build()
    make_contiguous(model)
    if performance.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if performance.small_map_convs:
        small_map_convs_as_products(model)
    return model


def run_threads(spec: RunSpec, run: JobRun) -> RunSpec:
    """Gives torch the run's thread count (a resumed run: its checkpoint's, saying so when they
    differ); returns ``spec`` with that count, which ``args.json`` records."""
    requested = spec.trainer.threads or torch.get_num_threads()
    recorded = None
    if run.ckpt_path is not None:
        with contextlib.suppress(Exception):  # unreadable: Lightning says so when it loads it
            saved = torch.load(run.ckpt_path, map_location="cpu", mmap=True, weights_only=False)
            recorded = saved.get(CHECKPOINT_KEY) if isinstance(saved, dict) else None
    threads, line = resumed_threads(requested, recorded)
    if line is not None and launched_as_rank_zero():
        print(line, flush=True)
    apply_threads(threads)
    return with_threads(spec, threads)


def _record_threads(threads: int):
    """A callback that stores ``threads`` in every checkpoint (``core.threads.CHECKPOINT_KEY``)."""
    from lightning.pytorch import Callback

    class RecordThreads(Callback):
        def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
            checkpoint[CHECKPOINT_KEY] = threads

    return RecordThreads()


def train_batches_per_process(data: dict[str, Any], processes: int, dali: bool) -> int | None:
    """The training batches of an epoch in each of the ``processes``, from the ``Trainer.fit``
    arguments ``data`` (a DALI module is built inside the fit); None when unknown."""
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
    pretraining: bool = False,
):
    """Trains ``model`` on the data of ``spec`` in the folder of ``run`` (resumed from
    ``run.ckpt_path`` when set); returns the Trainer, ``trainer.interrupted`` set when stopped.

    The data is ``dali_datamodule(spec)`` with ``data.format=dali``, else ``fit_data(spec,
    val_loader)``; ``callbacks(val_loader)`` join the Trainer's. A ``pretraining`` fit resumes
    within epochs as if never stopped (:mod:`solo_bayesncl.training.resumable`). Processes that do
    not all connect raise :class:`~solo_bayesncl.training.trainer.PeersNotMet`.
    """
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    spec = run_threads(spec, run)
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
    if pretraining and machine.performance.compile:
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
            _record_threads(int(machine.threads)),
            per_rank_random_streams(),
            stop_together(),
            *checkpoint_callbacks(checkpoint, machine.name, spec.solo, within_epochs=pretraining),
            *own,
            *([resumable_fit(int(machine.seed))] if pretraining else []),
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

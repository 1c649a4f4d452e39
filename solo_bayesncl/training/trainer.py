"""The Lightning Trainer, loggers and callbacks shared by the entry points.

Every run writes ``metrics.csv`` beside its checkpoints; wandb logs too when ``wandb.enabled``,
offline when no login is stored, so that no default asks for one or hangs. A job of several
processes (DDP) is one run (:func:`solo_bayesncl.training.auto_resume.decide_job_run`), which
:func:`job_run_agreement` checks.
"""

from __future__ import annotations

import csv
import inspect
import json
import os
import random
import re
import signal
import threading
import time
import warnings
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch

from solo_bayesncl.config.settings import CheckpointSpec, TrainerSpec
from solo_bayesncl.core.distributed import launched_as_rank_zero, rank_seed
from solo_bayesncl.training.auto_resume import (
    FINGERPRINT_KEY,
    JobRun,
    ResumePoint,
    checkpoint_position,
)

__all__ = [
    "PeersNotMet",
    "build_loggers",
    "build_trainer",
    "checkpoint_callbacks",
    "job_run_agreement",
    "per_rank_random_streams",
    "resume_line",
    "stop_together",
]


def _wandb_login_available() -> bool:
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") in {"offline", "disabled"}:
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


def build_loggers(spec: TrainerSpec, run_dir_root: Path, run: JobRun) -> list:
    """wandb (when ``wandb.enabled``) first, then a CSV logger writing ``metrics.csv`` into the
    run's checkpoint folder, ``<run id>`` with wandb, ``offline-<run id>`` without; a resumed
    run appends to its ``metrics.csv`` (:func:`_continue_metrics_csv`)."""
    from lightning.pytorch.loggers import CSVLogger

    loggers: list = []
    if spec.wandb.enabled:
        from lightning.pytorch.loggers.wandb import WandbLogger

        offline = spec.wandb.offline
        if not offline and not _wandb_login_available():
            print("wandb: no stored login (WANDB_API_KEY or ~/.netrc); logging offline instead.")
            offline = True
        wandb_logger = WandbLogger(
            name=spec.name,
            project=spec.wandb.project,
            entity=spec.wandb.entity,
            offline=offline,
            resume="allow" if run.ckpt_path else None,
            id=run.run_id,  # every process's logger names the same run
        )
        if launched_as_rank_zero():  # Lightning takes NODE_RANK=1 for rank 0 until it connects
            wandb_logger.log_hyperparams(dict(spec.arguments))
        loggers.append(wandb_logger)
        version = run.run_id
    else:
        version = f"offline-{run.run_id}"
    csv_logger = CSVLogger(save_dir=str(run_dir_root), name="", version=version)
    _continue_metrics_csv(csv_logger)
    loggers.append(csv_logger)
    return loggers


def _continue_metrics_csv(csv_logger) -> None:
    """Makes a CSV logger append to the ``metrics.csv`` already in its folder, under its header
    (extended when new columns come): Lightning's writer would rewrite the file with the columns
    of its first rows only and append its rows in another column order."""
    path = Path(csv_logger.log_dir) / "metrics.csv"
    if not path.is_file():
        return
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    with warnings.catch_warnings():  # "Previous log files ... will be deleted": they are kept
        warnings.filterwarnings("ignore", message="Experiment logs directory .* exists")
        writer = csv_logger.experiment
    if hasattr(writer, "metrics_keys"):  # rank 0's writer; the other ranks write nothing
        writer.metrics_keys = list(header)


def resume_line(run: JobRun, point: ResumePoint | None, world_size: int) -> str | None:
    """What a job says once when it begins: ``resumed from epoch E, step S (<checkpoint>)``,
    prefixed ``run <id>: the N processes`` for several (``... start it`` for a new run); None
    for a new run of one process."""
    resumed = None
    if run.ckpt_path is not None:
        where = point.phrase() if point is not None else "its checkpoint"
        resumed = f"resumed from {where} ({run.ckpt_path})"
    if world_size == 1:
        return resumed
    return f"run {run.run_id}: the {world_size} processes {resumed or 'start it'}"


def _rename_run(loggers: list, run_id: str) -> None:
    """Points this process's loggers, built before the processes met, at run ``run_id``: the CSV
    logger's folder (``offline-<id>``, ``<id>`` with wandb) and wandb's run id. Lightning reads
    these when it first needs them, after the callbacks' ``setup``."""
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.wandb import WandbLogger

    wandb = any(isinstance(logger, WandbLogger) for logger in loggers)
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            logger._id = logger._wandb_init["id"] = run_id
        elif isinstance(logger, CSVLogger):
            logger._version = run_id if wandb else f"offline-{run_id}"


def job_run_agreement(run: JobRun):
    """A callback that makes the processes of a job one run once they are connected: each takes
    global rank 0's run when it only drew another id (:meth:`JobRun.joining`); all stop before
    training when they still disagree (another checkpoint or config). It prints
    :func:`resume_line` once from global rank 0 and stores the run's fingerprint in every
    checkpoint (:data:`~solo_bayesncl.training.auto_resume.FINGERPRINT_KEY`)."""
    from lightning.pytorch import Callback

    class JobRunAgreement(Callback):
        def __init__(self) -> None:
            self.run = run
            self.point: ResumePoint | None = None

        def setup(self, trainer, pl_module, stage: str) -> None:
            if trainer.world_size == 1:
                return
            first = JobRun(**json.loads(trainer.strategy.broadcast(run.to_json(), src=0)))
            joined = run.joining(first)
            agree = trainer.strategy.reduce_boolean_decision(joined == first, all=True)
            if not agree:
                mine = "" if joined == first else f"; rank {trainer.global_rank}: {run.to_json()}"
                raise RuntimeError(
                    f"the {trainer.world_size} processes of this job chose different runs "
                    f"(rank 0: {first.to_json()}{mine}); every process must run the same config "
                    "and see the same checkpoint folder (checkpoint.dir)"
                )
            if joined.run_id != run.run_id:
                _rename_run(trainer.loggers, joined.run_id)
            self.run = joined

        def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
            self.point = checkpoint_position(checkpoint)

        def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
            checkpoint[FINGERPRINT_KEY] = self.run.fingerprint

        def on_fit_start(self, trainer, pl_module) -> None:
            line = resume_line(self.run, self.point, trainer.world_size)
            if line is not None and trainer.is_global_zero:
                print(line, flush=True)

    return JobRunAgreement()


def per_rank_random_streams():
    """A callback that seeds each process of a multi-process job from its rank
    (:func:`~solo_bayesncl.core.distributed.rank_seed`): ``seed_everything`` seeds them alike, so
    the i-th image of every rank would get the same augmentations."""
    from lightning.pytorch import Callback

    class PerRankRandomStreams(Callback):
        def setup(self, trainer, pl_module, stage: str) -> None:
            if trainer.world_size > 1:
                seed = rank_seed(torch.initial_seed(), trainer.global_rank)
                random.seed(seed)
                np.random.seed(seed)
                torch.manual_seed(seed)

    return PerRankRandomStreams()


def stop_together():
    """A callback that stops a fit on Ctrl-C or SIGTERM at one training step, in every process of
    a job, and never loses a Ctrl-C.

    One process: Ctrl-C raises KeyboardInterrupt where it lands, as Python does, and is marked.
    C code that probes an attribute swallows what is raised inside the probe (``torch.as_tensor``
    asking a config's list for ``__array__`` in the data pipeline, say), and the fit would train
    on as if no one had pressed it; so a marked Ctrl-C is raised again after the batch.

    Several processes: a signal reaches each at another point of its step, one inside a
    collective and one not; one that stopped there would leave its peers waiting in a collective
    it never joins, and they would crash. So during the fit a signal only marks its process (a
    second Ctrl-C stops it at once), and after each training step the processes agree in one
    all-reduce: when any was signalled, all stop there (on SIGTERM when any got one, else as on
    Ctrl-C). The all-reduce reads one number back each step, as the progress bar already does."""
    from lightning.pytorch import Callback

    stops = {signal.SIGINT: 1, signal.SIGTERM: 2}

    class StopTogether(Callback):
        def __init__(self) -> None:
            self.handling_ctrl_c = False  # its SIGINT handler is set (not where SIGINT is ignored)
            self.agreeing = False  # a multi-process fit, its handlers set from the main thread
            self.marked = 0
            self.sigterm_handler = None

        def _mark(self, signum, frame) -> None:
            at_once = signum == signal.SIGINT and (self.marked or not self.agreeing)
            if signum == signal.SIGINT and not at_once and launched_as_rank_zero():
                print(
                    "Ctrl-C: every process of the job stops after this training step "
                    "(Ctrl-C again stops this one at once)",
                    flush=True,
                )
            self.marked = max(self.marked, stops[signum])
            if at_once:
                raise KeyboardInterrupt

        def setup(self, trainer, pl_module, stage: str) -> None:
            if threading.current_thread() is not threading.main_thread():
                return  # only the main thread sets handlers
            self.agreeing = trainer.world_size > 1
            if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # nohup ... &: no Ctrl-C
                self.handling_ctrl_c = True
                signal.signal(signal.SIGINT, self._mark)

        def on_train_start(self, trainer, pl_module) -> None:
            if self.agreeing:  # in place of Lightning's, set just before, which stops one alone
                self.sigterm_handler = signal.signal(signal.SIGTERM, self._mark)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
            if not self.agreeing:
                self._raise_if_swallowed()
                return
            flag = torch.tensor(self.marked, device=trainer.strategy.root_device)
            agreed = int(trainer.strategy.reduce(flag, reduce_op="max"))
            if agreed == stops[signal.SIGTERM]:  # Lightning stops each process after this hook
                trainer._signal_connector.received_sigterm = True
            elif agreed:
                raise KeyboardInterrupt

        def on_validation_batch_end(self, trainer, pl_module, *args, **kwargs) -> None:
            if not self.agreeing:
                self._raise_if_swallowed()

        def _raise_if_swallowed(self) -> None:
            if self.marked:
                raise KeyboardInterrupt

        def _stop_handling(self) -> None:
            if self.handling_ctrl_c:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            if self.sigterm_handler is not None:
                signal.signal(signal.SIGTERM, self.sigterm_handler)
            self.handling_ctrl_c = self.agreeing = False
            self.sigterm_handler = None

        def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
            self._stop_handling()

        def teardown(self, trainer, pl_module, stage: str) -> None:
            self._stop_handling()

    return StopTogether()


class PeersNotMet(RuntimeError):
    """The processes of a multi-process or multi-node job did not all connect in time."""


LIGHTNING_LOG_EVERY_N_STEPS = 50  # Lightning's default log_every_n_steps


def _batches_within_limit(batches: int, limit: int | float | None) -> int:
    """The training batches of an epoch under Lightning's ``limit_train_batches`` (a count, or a
    share when a float)."""
    if limit is None:
        return batches
    if isinstance(limit, float):
        return int(batches * limit)
    return min(batches, int(limit))


def build_trainer(
    spec: TrainerSpec, loggers: list, callbacks: list, train_batches: int | None = None
):
    """A Trainer from the config's Trainer keys (``spec.arguments``).

    ``train_batches`` (an epoch's batches in each process, when known) caps the default
    ``log_every_n_steps`` at the epoch, so that a short epoch is still logged. Lightning
    checkpoints only through a ``ModelCheckpoint`` among ``callbacks``. A DDP job's processes
    wait ``distributed.timeout_s`` for each other.
    """
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint

    valid = inspect.signature(Trainer.__init__).parameters
    kwargs = {k: v for k, v in spec.arguments.items() if k in valid}
    if train_batches is not None and kwargs.get("log_every_n_steps") is None:
        epoch = _batches_within_limit(train_batches, kwargs.get("limit_train_batches"))
        kwargs["log_every_n_steps"] = max(1, min(LIGHTNING_LOG_EVERY_N_STEPS, epoch))
    strategy = spec.strategy
    if strategy == "ddp":
        from lightning.pytorch.strategies.ddp import DDPStrategy

        strategy = DDPStrategy(
            find_unused_parameters=False, timeout=timedelta(seconds=spec.peer_timeout_s)
        )
    kwargs.update(
        {
            "devices": spec.devices,
            "logger": loggers,
            "callbacks": callbacks,
            "enable_checkpointing": any(isinstance(c, ModelCheckpoint) for c in callbacks),
            "strategy": strategy,
        }
    )
    return Trainer(**kwargs)


_WITHIN_EPOCH = re.compile(r"-ep=(\d+)-step=\d+\.ckpt$")


def _interval_checkpoint(name: str, run_root: Path, seconds: float):
    """Lightning's ``ModelCheckpoint`` saving every ``seconds`` of training within an epoch, from
    the first step on, beside solo-learn's ``Checkpointer`` (``run_root/<logger version>``) as
    ``<name>-<version>-ep=<epoch>-step=<step>.ckpt``. Only the newest is kept, until the
    epoch's end is saved; the last batch of an epoch is left to the epoch's checkpoint.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint

    class IntervalCheckpoint(ModelCheckpoint):
        def __init__(self) -> None:
            super().__init__(
                monitor=None,
                save_top_k=1,
                train_time_interval=timedelta(seconds=seconds),
                save_on_train_epoch_end=False,
                auto_insert_metric_name=False,
                enable_version_counter=False,
            )

        def setup(self, trainer, pl_module, stage: str) -> None:
            version = str(trainer.logger.version)  # the Checkpointer's folder name
            self.dirpath = str(run_root / version)
            self.filename = f"{name}-{version}-ep={{epoch}}-step={{step}}"
            with warnings.catch_warnings():  # a resumed wandb run writes into its old folder
                warnings.filterwarnings("ignore", message="Checkpoint directory .* not empty")
                super().setup(trainer, pl_module, stage)

        def on_train_start(self, trainer, pl_module) -> None:
            super().on_train_start(trainer, pl_module)
            self._first_step = True
            if trainer.is_global_zero:
                print(
                    f"checkpoint.time_interval_s={seconds:g}: a checkpoint every {seconds:g} s "
                    f"of training within an epoch, the first {seconds:g} s after the first "
                    "step (a run stopped before it has only its epochs' checkpoints)",
                    flush=True,
                )

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
            if getattr(self, "_first_step", False):
                self._first_step = False
                self._last_time_checked = time.monotonic()  # the interval counts from here

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
            if batch_idx + 1 < trainer.num_training_batches:
                super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            saved = [getattr(cb, "last_ckpt", None) for cb in trainer.callbacks]
            ended = f"-ep={trainer.current_epoch}.ckpt"
            if any(str(p).endswith(ended) for p in saved if p) and trainer.is_global_zero:
                # this sitting's and the one a resumed run started from: the epoch's end is further
                for path in Path(self.dirpath).glob("*-ep=*-step=*.ckpt"):
                    match = _WITHIN_EPOCH.search(path.name)
                    if match and int(match.group(1)) <= trainer.current_epoch:
                        self._remove_checkpoint(trainer, str(path))
                self.best_model_path = ""
            self._last_time_checked = time.monotonic()  # an interval from the epoch's end

        def state_dict(self) -> dict:
            return {}

        def load_state_dict(self, state_dict: dict) -> None:
            pass

    return IntervalCheckpoint()


def checkpoint_callbacks(
    spec: CheckpointSpec, name: str, solo_cfg, within_epochs: bool = False
) -> list:
    """solo-learn's Checkpointer (checkpoints and ``args.json`` from ``solo_cfg``, under
    ``spec.run_root``) when ``checkpoint.enabled``; with ``within_epochs`` (pretraining) and
    ``checkpoint.time_interval_s`` > 0, the :func:`_interval_checkpoint` of run ``name`` too."""
    if not spec.enabled:
        return []
    from solo.utils.checkpointer import Checkpointer

    callbacks = [
        Checkpointer(
            solo_cfg, logdir=spec.run_root, frequency=spec.frequency, keep_prev=spec.keep_prev
        )
    ]
    if within_epochs and spec.time_interval_s:
        callbacks.append(_interval_checkpoint(name, spec.run_root, float(spec.time_interval_s)))
    return callbacks

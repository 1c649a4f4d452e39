"""One benchmark run (a method and a seed), executed in its own process so that its peak memory
is its own: pretraining, offline linear probe, kNN and the interpretability report.

Every stage writes its JSON into the run folder when it has *finished*, and is skipped when that
file exists, so an interrupted run picks up where it stopped. Finished means reached its target:

- pretraining: the Trainer ran to ``max_epochs`` (Lightning returns normally after Ctrl-C, so its
  status and epoch are checked) and the checkpoint it leaves is readable and of the last epoch.
  An interrupted pretraining resumes from its last readable checkpoint
  (:mod:`solo_bayesncl.training.auto_resume`); each epoch's randomness is seeded from the run's seed and
  the epoch, so a resumed run trains as the uninterrupted one would (with ``data.num_workers=0``;
  with loader workers, the first epoch after a resume draws its workers' seeds before the epoch
  is seeded, so its augmentations differ from an uninterrupted run's, with the same
  distributions).
- linear evaluation: the attempt's own Trainer reached ``max_epochs``; its accuracy is read from
  the ``metrics.csv`` of that Trainer's logger, never from another attempt's folder.

Each stage records its wall and CPU time and the machine's load
(:class:`~solo_bayesncl.benchmark.machine.StageMeter`), and the commit it ran at. Progress goes to
``status.json`` for the benchmark's display. ``result.json`` is written last.

    python -m solo_bayesncl.benchmark.run_one RUN_DIR/spec.json

Exit status: 0 finished, 130 interrupted (SIGINT), 143 terminated (SIGTERM, or the benchmark
process that started it ended), 3 a stage ended without reaching its target.
"""

from __future__ import annotations

import csv
import ctypes
import datetime as dt
import json
import os
import random
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from solo_bayesncl.training.trainer import last_logged_value

__all__ = ["LINEAR_CONFIG", "PARENT_ENV", "StageUnfinished", "linear_probe_label", "run"]

#: Environment variable holding the pid of the benchmark process that started this run.
PARENT_ENV = "SOLO_BAYESNCL_BENCHMARK_PARENT"
EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_UNFINISHED = 130, 143, 3
LINEAR_CONFIG = "linear_sgd.yaml"
"""The linear-probe config of a preset that names none (``linear.config``): SGD with step decay.
The paper presets name ``linear.yaml``, the official probe of the NCL/BayesNCL papers."""


class StageUnfinished(RuntimeError):
    """A stage ended without reaching its target; nothing of it is recorded."""


class Terminated(BaseException):
    """Raised by the SIGTERM handler (a BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` swallows it)."""


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float) + "\n")
    tmp.replace(path)  # a stage's JSON never looks finished before it is


def _peak_memory_mb() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _compose(config_dir: Path, name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(config_dir), version_base="1.2"):
        cfg = compose(config_name=name, overrides=overrides)
    OmegaConf.set_struct(cfg, False)
    return cfg


def _callbacks(run_dir: Path, seed: int, status, stage: str) -> list:
    """The benchmark's Lightning callbacks (Lightning imported only in the run process)."""
    from lightning.pytorch import Callback

    class EpochTimer(Callback):
        """Wall and CPU seconds of every training epoch in ``epoch_times.json``, keyed by epoch
        (kept across resumes; an epoch run again replaces its earlier figure)."""

        def __init__(self) -> None:
            self.path = run_dir / f"{stage}_epoch_times.json"
            self._start: tuple[int, float, float] | None = None

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            from solo_bayesncl.benchmark.machine import cpu_seconds

            self._start = (trainer.current_epoch, time.perf_counter(), cpu_seconds())

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            from solo_bayesncl.benchmark.machine import cpu_seconds

            # a resumed fit calls this hook again for the checkpoint's epoch without a start
            if self._start is None or self._start[0] != trainer.current_epoch:
                return
            epoch, wall, cpu = self._start
            times = json.loads(self.path.read_text()) if self.path.is_file() else {}
            times[str(epoch)] = {
                "wall_s": time.perf_counter() - wall,
                "cpu_s": cpu_seconds() - cpu,
            }
            _write_json(self.path, times)
            self._start = None

    class EpochSeeder(Callback):
        """Seeds Python, NumPy and torch from (seed, epoch) when an epoch starts, so that an
        epoch's randomness does not depend on whether the run was resumed before it."""

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            import numpy as np
            import torch

            epoch_seed = (seed * 1_000_003 + trainer.current_epoch) % 2**32
            random.seed(epoch_seed)
            np.random.seed(epoch_seed)
            torch.manual_seed(epoch_seed)

    class AttemptLog(Callback):
        """Appends this sitting's log folder and the checkpoint it resumed from to
        ``<stage>_attempts.jsonl``, to stitch the metrics of resumed runs together."""

        def on_train_start(self, trainer, pl_module) -> None:
            from lightning.pytorch.loggers import CSVLogger

            csv_logger = next(lg for lg in trainer.loggers if isinstance(lg, CSVLogger))
            entry = {
                "folder": str(csv_logger.log_dir),
                "resumed_from": str(trainer.ckpt_path) if trainer.ckpt_path else None,
                "start_epoch": int(trainer.current_epoch),
                "start_step": int(trainer.global_step),
            }
            with open(run_dir / f"{stage}_attempts.jsonl", "a") as f:
                f.write(json.dumps(entry) + "\n")

    class Progress(Callback):
        """Epoch and batch of the fit in ``status.json``."""

        def _write(self, trainer, batch: int, force: bool) -> None:
            batches = trainer.num_training_batches
            status.update(
                force=force,
                stage=stage,
                epoch=int(trainer.current_epoch),
                epochs=int(trainer.max_epochs),
                batch=batch,
                batches=int(batches) if batches != float("inf") else None,
            )

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            self._write(trainer, 0, force=True)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            self._write(trainer, batch_idx + 1, force=False)

    if stage == "pretrain":
        return [EpochSeeder(), EpochTimer(), Progress(), AttemptLog()]
    return [EpochTimer(), Progress()]  # linear evaluation restarts from scratch when interrupted


def _check_finished(trainer, what: str) -> None:
    """Raises KeyboardInterrupt when Lightning swallowed one, StageUnfinished when the fit
    stopped before ``max_epochs``."""
    from lightning.pytorch.trainer.states import TrainerStatus

    if trainer.interrupted:
        raise KeyboardInterrupt
    if trainer.state.status != TrainerStatus.FINISHED or trainer.current_epoch < trainer.max_epochs:
        raise StageUnfinished(
            f"{what} stopped at epoch {trainer.current_epoch} of {trainer.max_epochs} "
            f"(status {trainer.state.status.value})"
        )


def _merge_metrics(run_dir: Path, final_folder: str, out: Path) -> Path:
    """One ``metrics.csv`` for a pretraining resumed over several sittings: each sitting's rows
    from its first epoch up to the epoch the next sitting resumed at."""
    attempts: dict[str, dict[str, Any]] = {}
    log = run_dir / "pretrain_attempts.jsonl"
    for line in log.read_text().splitlines() if log.is_file() else []:
        entry = json.loads(line)
        attempts[entry["folder"]] = entry  # the last sitting that wrote to a folder
    chain: list[dict[str, Any]] = []
    entry = attempts.get(final_folder)
    while entry is not None and entry not in chain:
        chain.insert(0, entry)
        previous = entry["resumed_from"]
        entry = attempts.get(str(Path(previous).parent)) if previous else None
    if not chain:
        chain = [{"folder": final_folder, "start_epoch": 0, "start_step": 0}]
    rows: list[dict[str, str]] = []
    fields: list[str] = []
    for i, sitting in enumerate(chain):
        end = chain[i + 1] if i + 1 < len(chain) else None
        path = Path(sitting["folder"]) / "metrics.csv"
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row.get("epoch"):
                    position, start = float(row["epoch"]), sitting["start_epoch"]
                    stop = end["start_epoch"] if end else None
                else:
                    position, start = float(row.get("step") or 0), sitting["start_step"]
                    stop = end["start_step"] if end else None
                if position >= start and (stop is None or position < stop):
                    fields += [k for k in row if k not in fields]
                    rows.append(row)
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(out)
    return out


def _epoch_timing(run_dir: Path, stage: str, epochs: int) -> dict[str, Any]:
    """Mean wall and CPU seconds per epoch over the epochs of the finished run (a resumed
    epoch counted once), and whether the machine's load made the wall times unreliable."""
    from solo_bayesncl.benchmark.machine import StageMeter, load_unreliable

    path = run_dir / f"{stage}_epoch_times.json"
    times = json.loads(path.read_text()) if path.is_file() else {}
    kept = [times[str(e)] for e in range(epochs) if str(e) in times]
    if not kept:
        return {"seconds_per_epoch": None, "cpu_seconds_per_epoch": None}
    wall, cpu = sum(t["wall_s"] for t in kept), sum(t["cpu_s"] for t in kept)
    load = StageMeter(samples_file=run_dir / f"{stage}_load.jsonl").result()
    load.update(wall_s=wall, cpu_s=cpu)
    return {
        "seconds_per_epoch": wall / len(kept),
        "cpu_seconds_per_epoch": cpu / len(kept),
        "epoch_load_mean": load["load_mean"],
        "cpu_count": load["cpu_count"],
        "wall_unreliable": load_unreliable(load),
    }


def _pretrain(spec: dict[str, Any], run_dir: Path, status) -> dict[str, Any]:
    import torch

    from solo_bayesncl.training.pretrain import pretrain

    out = run_dir / "pretrain"
    overrides = spec["overrides"] + [
        f"seed={spec['seed']}",
        f"checkpoint.dir={out}",
        "++checkpoint.enabled=True",
        "++checkpoint.frequency=1",  # the last epoch must be saved
        "++auto_resume.enabled=True",
        "++auto_resume.max_hours=1000000",
        "++wandb.enabled=False",
        "++enable_progress_bar=False",  # the benchmark shows progress; the log stays readable
    ]
    cfg = _compose(Path(spec["config_dir"]), f"{spec['method']}.yaml", overrides)
    status.update(stage="pretrain", epoch=0, epochs=int(cfg.max_epochs), batch=0, batches=None)
    trainer = pretrain(cfg, extra_callbacks=_callbacks(run_dir, spec["seed"], status, "pretrain"))
    _check_finished(trainer, "pretraining")
    checkpointer = next(
        (cb for cb in trainer.callbacks if type(cb).__name__ == "Checkpointer"), None
    )
    # this sitting's last checkpoint, or the one it resumed from when that was already final
    ckpt = getattr(checkpointer, "last_ckpt", None) or trainer.ckpt_path
    if ckpt is None:
        raise StageUnfinished("pretraining finished without a checkpoint")
    saved_epoch = torch.load(ckpt, map_location="cpu", weights_only=False).get("epoch", -1)
    if saved_epoch + 1 < trainer.max_epochs:
        raise StageUnfinished(
            f"the last checkpoint {ckpt} is of epoch {saved_epoch + 1}, not {trainer.max_epochs}"
        )
    from lightning.pytorch.loggers import CSVLogger

    log_dir = next(lg for lg in trainer.loggers if isinstance(lg, CSVLogger)).log_dir
    metrics = _merge_metrics(run_dir, str(log_dir), run_dir / "pretrain_metrics.csv")
    return {
        "checkpoint": str(Path(ckpt).resolve()),
        "metrics_csv": str(metrics),
        **_epoch_timing(run_dir, "pretrain", trainer.max_epochs),
        "epochs": int(trainer.max_epochs),
        "peak_memory_mb": _peak_memory_mb(),
        "online_linear_top1": last_logged_value(metrics, "val_acc1"),
    }


def linear_config_dir(pretrain_config_dir: str | Path) -> Path:
    """``.../pretrain/<group>`` -> ``.../linear/<group>`` (path components, not text; see
    :func:`solo_bayesncl.config.shipped.linear_dir_for`)."""
    from solo_bayesncl.config.shipped import linear_dir_for

    return linear_dir_for(pretrain_config_dir)


def _linear(spec: dict[str, Any], run_dir: Path, ckpt: str, status) -> dict[str, Any]:
    from lightning.pytorch.loggers import CSVLogger
    from omegaconf import OmegaConf

    from solo_bayesncl.io.checkpoints import load_checkpoint
    from solo_bayesncl.training.linear import linear_eval

    trained = load_checkpoint(ckpt).cfg
    data = trained.data
    dataset = OmegaConf.select(trained, "data.offline_dataset", default=None) or data.dataset
    linear = spec["linear"]
    epochs = int(linear.get("max_epochs", 100))
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
        "++enable_progress_bar=False",
        f"accelerator={trained.accelerator}",
        *linear.get("overrides", []),
    ]
    if dataset not in ("fashion-mnist",):
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
    config_dir = spec.get("linear_config_dir") or linear_config_dir(spec["config_dir"])
    config_name = linear.get("config", LINEAR_CONFIG)
    cfg = _compose(Path(config_dir), config_name, overrides)
    if "max_epochs" in linear and cfg.scheduler.name == "step":
        epochs = int(linear["max_epochs"])
        cfg.scheduler.lr_decay_steps = [int(epochs * 0.6), int(epochs * 0.8)]
    probe = linear_probe_label(config_name, cfg)
    status.update(stage="linear", epoch=0, epochs=int(cfg.max_epochs), batch=0, batches=None)
    trainer = linear_eval(
        cfg, overrides, extra_callbacks=_callbacks(run_dir, spec["seed"], status, "linear")
    )
    _check_finished(trainer, "linear evaluation")
    log_dir = next(lg for lg in trainer.loggers if isinstance(lg, CSVLogger)).log_dir
    metrics = Path(log_dir) / "metrics.csv"  # this attempt's own log
    top1 = last_logged_value(metrics, "val_acc1")
    if top1 is None:
        raise StageUnfinished(f"linear evaluation logged no val_acc1 in {metrics}")
    return {"linear_top1": top1, "linear_metrics_csv": str(metrics), "linear_probe": probe}


def linear_probe_label(config_name: str, cfg) -> str:
    """Which probe a run used, for the table: config file, optimizer, lr, schedule, epochs."""
    return (
        f"{config_name}: {cfg.optimizer.name} lr {cfg.optimizer.lr:g}, {cfg.scheduler.name}, "
        f"{cfg.max_epochs} epochs, batch {cfg.optimizer.batch_size}"
    )


def _knn(spec: dict[str, Any], ckpt: str, status) -> dict[str, Any]:
    from solo_bayesncl.evaluation.knn import knn_eval

    status.update(stage="knn")
    knn = spec["knn"]
    k = int(knn.get("k", 20))
    results = knn_eval(
        ckpt, ks=(k,), temperature=float(knn.get("temperature", 0.07)), num_workers=2
    )
    return {"knn_top1": results[f"knn_top1_k{k}"], "k": k}


def _report(spec: dict[str, Any], run_dir: Path, ckpt: str, status) -> dict[str, Any]:
    from solo_bayesncl.evaluation.report import write_report

    status.update(stage="report")
    report_dir = run_dir / "report"
    write_report(
        ckpt,
        report_dir,
        overwrite=True,
        progress=False,
        protocol=spec.get("protocol", "standard"),
        **spec.get("report", {}),
    )
    report = json.loads((report_dir / "metrics.json").read_text())
    return {
        "metrics": report["metrics"],
        "metrics_paper": report.get("metrics_paper"),
        "gate_open_rate": report.get("gate_open_rate"),
        "dataset": report.get("dataset"),
        "report_dir": str(report_dir),
    }


def run(spec_path: Path) -> dict[str, Any]:
    """Runs every unfinished stage of the run described by ``spec_path``; returns its result."""
    from solo_bayesncl.benchmark.machine import StageMeter, git_state, load_unreliable
    from solo_bayesncl.benchmark.progress import StatusFile

    spec = json.loads(spec_path.read_text())
    run_dir = spec_path.parent
    status = StatusFile(run_dir / "status.json")
    code = git_state()
    stages: dict[str, dict[str, Any]] = {}

    def stage(name: str, work) -> dict[str, Any]:
        path = run_dir / f"{name}.json"
        if not path.is_file():
            with StageMeter(samples_file=run_dir / f"{name}_load.jsonl") as meter:
                data = work()
            timing = meter.result()
            timing["load_unreliable"] = load_unreliable(timing)
            data.update(
                timing=timing,
                commit=code["commit"],
                dirty=code["dirty"],
                finished_at=dt.datetime.now().isoformat(timespec="seconds"),
            )
            _write_json(path, data)
        stages[name] = json.loads(path.read_text())
        return stages[name]

    ckpt = stage("pretrain", lambda: _pretrain(spec, run_dir, status))["checkpoint"]
    stage("linear", lambda: _linear(spec, run_dir, ckpt, status))
    stage("knn", lambda: _knn(spec, ckpt, status))
    report_json = run_dir / "report.json"
    if (
        spec.get("protocol") == "paper"
        and report_json.is_file()
        and not json.loads(report_json.read_text()).get("metrics_paper")
    ):
        report_json.unlink()  # a standard report: the paper figures are the missing stage
    report = stage("report", lambda: _report(spec, run_dir, ckpt, status))
    background_json = run_dir / "background.json"
    if report.get("dataset") == "fashion-mnist-scenes" and not background_json.is_file():
        from solo_bayesncl.evaluation.background import background_measures

        status.update(stage="report")
        _write_json(background_json, background_measures(ckpt))

    commits = sorted({s["commit"] for s in stages.values()})
    pretrain = stages["pretrain"]
    result = {
        "method": spec["method"],
        "variant": spec.get("variant", spec["method"]),
        "seed": spec["seed"],
        "run_key": spec["run_key"],
        **{k: v for k, v in pretrain.items() if k not in ("metrics_csv", "timing", "commit")},
        "pretrain_metrics_csv": pretrain["metrics_csv"],
        "pretrain_wall_s": pretrain["timing"]["wall_s"],
        "linear_top1": stages["linear"]["linear_top1"],
        "linear_probe": stages["linear"].get("linear_probe"),
        "knn_top1": stages["knn"]["knn_top1"],
        "metrics": stages["report"]["metrics"],
        "gate_open_rate": stages["report"].get("gate_open_rate"),
        "commit": commits[0] if len(commits) == 1 else "+".join(commits),
        "dirty": any(s["dirty"] is True for s in stages.values())
        or ("unknown" if any(s["dirty"] == "unknown" for s in stages.values()) else False),
        "timing": {name: s["timing"] for name, s in stages.items()},
    }
    if report.get("metrics_paper"):
        result["metrics_paper"] = report["metrics_paper"]
    if background_json.is_file():
        result["background"] = json.loads(background_json.read_text())
    _write_json(run_dir / "result.json", result)
    status.update(stage="done")
    return result


def _watch_parent() -> None:
    """Ends this run when the benchmark process that started it ends, even by SIGKILL: the
    kernel sends SIGTERM on the parent's death (``prctl(PR_SET_PDEATHSIG)`` on Linux) and a
    thread checks the parent pid every second elsewhere (and as a second line on Linux)."""
    expected = os.environ.get(PARENT_ENV)
    if not expected:
        return  # started by hand
    expected_pid = int(expected)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass

    def check() -> bool:
        if os.getppid() != expected_pid:
            os.kill(os.getpid(), signal.SIGTERM)
            return False
        return True

    if not check():
        return

    def loop() -> None:
        while check():
            time.sleep(1.0)

    threading.Thread(target=loop, name="parent-watchdog", daemon=True).start()


_terminating = threading.Event()


def _terminate(signum, frame) -> None:
    """SIGTERM: stop once (the parent's death may signal twice: the kernel and the watchdog)."""
    if not _terminating.is_set():
        _terminating.set()
        raise Terminated


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _terminate)
    _watch_parent()
    try:
        run(Path(args[0]))
    except KeyboardInterrupt:
        print("run interrupted (SIGINT); nothing unfinished was recorded", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("run terminated (SIGTERM); nothing unfinished was recorded", file=sys.stderr)
        return EXIT_TERMINATED
    except StageUnfinished as err:
        print(f"run unfinished: {err}", file=sys.stderr)
        return EXIT_UNFINISHED
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

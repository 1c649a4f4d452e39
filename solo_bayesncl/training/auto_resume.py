"""Auto-resume that only resumes the same run (docs/resuming.md, "Where a run resumes").

solo-learn's ``AutoResumer`` matches an earlier run on a dozen keys, so a run that differs only in
``data.fraction`` would "resume" a finished checkpoint and train nothing. Here the whole resolved
config is compared, apart from :data:`MAY_DIFFER`, in solo-learn's layout
(``checkpoint.dir/<method>/<version>/``: ``args.json`` and the checkpoints); the run resumes from
the readable checkpoint furthest on (:func:`resume_order`).

With several processes (DDP) the run's id and checkpoint are decided once per job
(:func:`decide_job_run`). Under Lightning's launcher the process the user started decides and
hands its :class:`JobRun` to the processes it launches in :data:`JOB_RUN_ENV`, so none scans the
folder again (a checkpoint could age past ``max_hours`` in between). Under an external launcher
(srun, torchrun, or by hand on every node) every process scans the same files and derives a new
run's id from the job's id where there is one; once connected, the processes take global rank 0's
id (:meth:`JobRun.joining`) and check that all agree
(:func:`solo_bayesncl.training.trainer.job_run_agreement`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from solo_bayesncl.core.distributed import launched_as_rank_zero

__all__ = [
    "JOB_RUN_ENV",
    "FINGERPRINT_KEY",
    "MAY_DIFFER",
    "UNUSED_SECTIONS",
    "JobRun",
    "ResumePoint",
    "checkpoint_position",
    "config_differences",
    "config_fingerprint",
    "decide_job_run",
    "find_resume_checkpoint",
    "read_position",
    "resume_order",
    "shared_with_launched_processes",
]

JOB_RUN_ENV = "SOLO_BAYESNCL_JOB_RUN"
#: Job ids that every process of an externally launched job shares ("none" is torchrun's default).
_JOB_ID_ENV = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")

#: Dotted keys (and everything below them) that two sittings of the same run may set differently.
MAY_DIFFER: tuple[str, ...] = (
    "accelerator",
    "auto_resume",
    "checkpoint",
    "devices",
    "distributed",  # how long the processes wait for each other
    "enable_progress_bar",
    "num_nodes",
    "strategy",
    "sync_batchnorm",  # follows the machine (off on the CPU), like devices
    "threads",  # a resumed run trains on its checkpoint's count (core.threads)
    "data.num_workers",
    "performance",
    "resume_from_checkpoint",
    "wandb",
    "wandb_run_id",
)
#: Keys holding a data path: compared as resolved paths, so two spellings of one folder agree.
_PATH_KEYS = ("data.train_path", "data.val_path")
_MISSING = "<not set>"
_POSITION = re.compile(r"ep=(\d+)(?:-step=(\d+))?\.ckpt$")


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _flatten(sub, f"{prefix}{key}.")
    else:
        yield prefix[:-1], value


def _may_differ(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in MAY_DIFFER)


#: Sections a run does not use, by its flattened config: solo-learn's ``parse_cfg`` adds ``dali.*``
#: and ``auto_umap.*`` when those extras are importable, which must not change the run.
UNUSED_SECTIONS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "dali": lambda flat: flat.get("data.format") != "dali",
    "auto_umap": lambda flat: flat.get("auto_umap.enabled") is not True,
}


def _identity(cfg_container: dict[str, Any]) -> dict[str, Any]:
    """The flattened keys that make a run's identity: all but :data:`MAY_DIFFER` and
    :data:`UNUSED_SECTIONS`."""
    flat = dict(_flatten(cfg_container))
    unused = tuple(section + "." for section, idle in UNUSED_SECTIONS.items() if idle(flat))
    return {
        key: value
        for key, value in flat.items()
        if not _may_differ(key) and not key.startswith(unused)
    }


def _normalise(key: str, value: Any) -> Any:
    if key in _PATH_KEYS and isinstance(value, str) and value:
        return os.path.realpath(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` for every identity key (:func:`_identity`) that differs
    between two plain configs, as ``args.json`` stores them."""
    flat_old, flat_new = _identity(old), _identity(new)
    diffs = []
    for key in sorted(set(flat_old) | set(flat_new)):
        a, b = flat_old.get(key, _MISSING), flat_new.get(key, _MISSING)
        if _normalise(key, a) != _normalise(key, b):
            diffs.append((key, a, b))
    return diffs


@dataclass(frozen=True)
class ResumePoint:
    """Where a checkpoint leaves a fit: ``epoch`` epochs finished (the epoch training continues
    in), ``batch`` batches of it already trained (0 at an epoch's end), ``step`` optimizer steps."""

    epoch: int
    step: int
    batch: int = 0

    def phrase(self) -> str:
        """``epoch 3, step 1234``."""
        return f"epoch {self.epoch}, step {self.step}"


def checkpoint_position(checkpoint: dict[str, Any]) -> ResumePoint:
    """The :class:`ResumePoint` of a loaded Lightning checkpoint, from its fit loop's counters;
    without them, the end of its ``epoch``."""
    step = int(checkpoint.get("global_step", 0))
    loops = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    epochs = (loops.get("epoch_progress") or {}).get("current")
    if not epochs:
        return ResumePoint(int(checkpoint.get("epoch", -1)) + 1, step)
    finished = int(epochs["processed"])
    if int(epochs["ready"]) <= finished:  # saved once the epoch was over
        return ResumePoint(finished, step)
    batches = loops["epoch_loop.batch_progress"]["current"]
    return ResumePoint(finished, step, int(batches["processed"]))


def read_position(path: str | Path) -> ResumePoint | None:
    """The :class:`ResumePoint` of the checkpoint file ``path`` (its tensors mapped, not read),
    None when it cannot be read."""
    try:
        ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception:  # noqa: BLE001 - any failure means "not resumable"
        return None
    return checkpoint_position(ckpt) if isinstance(ckpt, dict) else None


def _progress(path: Path) -> tuple[int, float]:
    """``(N, inf)`` for the end of epoch ``N`` by a checkpoint's name, ``(N, S)`` for step ``S``
    within it, ``(-1, -1)`` for any other name."""
    match = _POSITION.search(path.name)
    if not match:
        return -1, -1.0
    return int(match.group(1)), math.inf if match.group(2) is None else float(match.group(2))


def resume_order(paths: list[Path]) -> list[Path]:
    """``paths`` furthest first (:func:`_progress`), the newest file first among equals (a
    resumed sitting saves the same epoch again)."""
    return sorted(paths, key=lambda p: (*_progress(p), p.stat().st_mtime), reverse=True)


def _candidates(
    run_root: Path, max_hours: float
) -> Iterator[tuple[Path, Any, list[Path], list[Path]]]:
    """``(folder, its args.json, its checkpoints no older than max_hours, the older ones)`` of
    each earlier run with a checkpoint."""
    oldest = time.time() - max_hours * 3600
    for args_file in run_root.glob("*/args.json"):
        ckpts = list(args_file.parent.glob("*.ckpt"))
        if not ckpts:
            continue
        try:
            args = json.loads(args_file.read_text())
        except (OSError, ValueError):
            continue
        fresh = [p for p in ckpts if p.stat().st_mtime >= oldest]
        yield args_file.parent, args, fresh, [p for p in ckpts if p not in fresh]


def _too_old_line(checkpoints: list[Path], max_hours: float) -> str:
    """What a rerun says when the same run's checkpoints are all older than ``max_hours``."""
    newest = max(checkpoints, key=lambda p: p.stat().st_mtime)
    hours = (time.time() - newest.stat().st_mtime) / 3600
    return (
        f"auto-resume: not resuming from {newest}: saved {hours:.1f} h ago, older than "
        f"auto_resume.max_hours={max_hours:g}; starting a new run (raise auto_resume.max_hours "
        "to resume it)"
    )


#: The entry of a checkpoint holding the :func:`config_fingerprint` of the run that saved it.
FINGERPRINT_KEY = "solo_bayesncl_fingerprint"


def _resumable(
    path: Path, fingerprint: str | None, shapes: dict[str, tuple[int, ...]] | None
) -> str | None:
    """None when the checkpoint loads and belongs to this run, else why not: unreadable, saved
    by another configuration (:data:`FINGERPRINT_KEY`), or weights other than ``shapes``."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any failure means "not resumable"
        return f"unreadable checkpoint {path} ({type(err).__name__}: {err}"[:300] + ")"
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        return f"unreadable checkpoint {path} (no state_dict in it)"
    saved_by = ckpt.get(FINGERPRINT_KEY)
    if fingerprint is not None and saved_by is not None and saved_by != fingerprint:
        return (
            f"checkpoint {path}: saved by a run of another configuration (fingerprint "
            f"{saved_by}, this run's {fingerprint})"
        )
    if shapes is not None:
        theirs = {k: tuple(v.shape) for k, v in ckpt["state_dict"].items() if hasattr(v, "shape")}
        if theirs != shapes:
            odd = sorted(set(theirs) ^ set(shapes)) or sorted(
                k for k in theirs if theirs[k] != shapes[k]
            )
            return f"checkpoint {path}: weights of another model ({len(odd)} differ, e.g. {odd[0]})"
    return None


def _describe(diffs: list[tuple[str, Any, Any]], limit: int = 8) -> str:
    parts = [f"{key}: {old!r} -> {new!r}" for key, old, new in diffs[:limit]]
    if len(diffs) > limit:
        parts.append(f"and {len(diffs) - limit} more")
    return ", ".join(parts)


def find_resume_checkpoint(
    cfg_container: dict[str, Any],
    run_root: str | Path,
    max_hours: float = 36,
    log: Callable[[str], None] = print,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> tuple[Path | None, str | None]:
    """The checkpoint to resume the run ``cfg_container`` (the resolved config as ``args.json``
    holds it) from, and its folder's run id; ``(None, None)`` when no earlier sitting under
    ``run_root`` has a checkpoint no older than ``max_hours`` (the closest other run's differing
    keys are logged). Checkpoints :func:`_resumable` refuses (``shapes``: the model's, name to
    shape) are skipped with one line each."""
    run_root = Path(run_root)
    closest: tuple[Path, list] | None = None
    same_run: dict[Path, Path] = {}  # checkpoint: its run's folder
    too_old: list[Path] = []  # the same run's checkpoints older than max_hours
    for folder, args, checkpoints, old in _candidates(run_root, max_hours):
        diffs = config_differences(args, cfg_container)
        if not diffs:
            same_run.update(dict.fromkeys(checkpoints, folder))
            too_old.extend(old)
        elif checkpoints and (closest is None or len(diffs) < len(closest[1])):
            closest = (folder, diffs)
    fingerprint = config_fingerprint(cfg_container)
    for ckpt in resume_order(list(same_run)):
        problem = _resumable(ckpt, fingerprint, shapes)
        if problem is None:
            log(f"auto-resume: resuming the same run from {ckpt}")
            return ckpt, same_run[ckpt].name.removeprefix("offline-")
        log(f"auto-resume: skipping {problem}")
    if too_old:
        log(_too_old_line(too_old, max_hours))
    elif closest is not None:
        log(
            f"auto-resume: no earlier run in {run_root} has the same settings; starting a new "
            f"run. The closest ({closest[0].name}) differs in {_describe(closest[1])}"
        )
    return None, None


def config_fingerprint(cfg_container: dict[str, Any]) -> str:
    """A short hash of the config's identity (:func:`_identity`): the same in every process of a
    job and every sitting of a run."""
    flat = [
        (key, _normalise(key, value)) for key, value in sorted(_identity(cfg_container).items())
    ]
    return hashlib.sha256(json.dumps(flat, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JobRun:
    """What every process of a job agrees on: the run's id (its folder is ``offline-<id>``, or
    ``<id>`` with wandb), the checkpoint it resumes from (None for a new run) and the
    :func:`config_fingerprint`."""

    run_id: str
    ckpt_path: str | None
    fingerprint: str

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def joining(self, first: JobRun) -> JobRun:
        """This process's run once it meets ``first``, global rank 0's: ``first`` when both
        train one config from one checkpoint (or none) and differ only in the id each drew
        (processes started by hand on several nodes), else itself, for the Trainer to compare."""
        same = (self.ckpt_path, self.fingerprint) == (first.ckpt_path, first.fingerprint)
        return first if same else self


def _new_run_id(fingerprint: str, ckpt_path: str | None) -> str:
    """A new run's id: from the job's id (``_JOB_ID_ENV``) when an external launcher started
    every process, else random (the deciding process hands it down)."""
    job = next(
        (os.environ[k] for k in _JOB_ID_ENV if os.environ.get(k) not in (None, "", "none")), None
    )
    if job is None:
        return secrets.token_hex(4)
    return hashlib.sha256(f"{job}|{fingerprint}|{ckpt_path}".encode()).hexdigest()[:8]


def decide_job_run(
    cfg_container: dict[str, Any],
    run_root: str | Path,
    resume: bool,
    max_hours: float = 36,
    explicit_ckpt: str | None = None,
    log: Callable[[str], None] = print,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> JobRun:
    """The run this job trains, the same in every process (module docstring).

    ``explicit_ckpt`` (``resume_from_checkpoint``) wins over auto-resume (``resume``,
    :func:`find_resume_checkpoint`); a run auto-resumed keeps its id, hence its folder. A process
    Lightning's launcher started reads the decision from :data:`JOB_RUN_ENV`, refusing a config
    other than the one it was made for.
    """
    fingerprint = config_fingerprint(cfg_container)
    shared = os.environ.get(JOB_RUN_ENV)
    if shared and not launched_as_rank_zero():
        run = JobRun(**json.loads(shared))
        if run.fingerprint != fingerprint:
            raise RuntimeError(
                f"this process's config (fingerprint {fingerprint}) differs from the one the job "
                f"was started with ({run.fingerprint}); every process must run the same config"
            )
        return run
    quiet = not launched_as_rank_zero()  # every process of an external launch scans; one speaks
    ckpt_path, run_id = explicit_ckpt, None
    if ckpt_path is None and resume:
        found, run_id = find_resume_checkpoint(
            cfg_container,
            run_root,
            max_hours,
            log=(lambda _: None) if quiet else log,
            shapes=shapes,
        )
        ckpt_path = None if found is None else str(found)
    ckpt_path = None if ckpt_path is None else str(ckpt_path)
    return JobRun(run_id or _new_run_id(fingerprint, ckpt_path), ckpt_path, fingerprint)


@contextlib.contextmanager
def shared_with_launched_processes(run: JobRun):
    """Puts ``run`` into :data:`JOB_RUN_ENV` for the block (Lightning's launcher starts the other
    processes inside ``Trainer.fit``), the previous value back afterwards."""
    previous = os.environ.get(JOB_RUN_ENV)
    os.environ[JOB_RUN_ENV] = run.to_json()
    try:
        yield run
    finally:
        if previous is None:
            os.environ.pop(JOB_RUN_ENV, None)
        else:
            os.environ[JOB_RUN_ENV] = previous

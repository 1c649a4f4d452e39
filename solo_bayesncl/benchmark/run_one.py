"""One benchmark run (a method and a seed), executed in its own process so that its peak memory
is its own: pretraining, offline linear probe, kNN and the interpretability report.

Every stage writes its JSON into the run folder when it has *finished* (reached its target:
pretraining and the linear probe their ``max_epochs``), and is skipped when that file exists, so
an interrupted run picks up where it stopped; pretraining resumes from its furthest readable
checkpoint (:mod:`solo_bayesncl.training.auto_resume`). kNN and the report share one pass over
the validation images (:class:`~.stages.ValidationPass`), made in the kNN stage. Each stage
records its time, the machine's load (:class:`~.machine.StageMeter`) and the commit; progress
goes to ``status.json``, and ``result.json`` is written last.

    python -m solo_bayesncl.benchmark.run_one RUN_DIR/spec.json

Exit status: 0 finished, 130 interrupted (SIGINT), 143 terminated (SIGTERM, or the benchmark
process that started it ended), 3 a stage ended without reaching its target. A stopped run says
what is kept and where the next run of the same command continues (:func:`stopped_message`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

from solo_bayesncl.benchmark.machine import StageMeter, git_state, load_unreliable
from solo_bayesncl.benchmark.presets import RunOrder
from solo_bayesncl.benchmark.process import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_UNFINISHED,
    PARENT_ENV,
    Terminated,
    handle_sigterm,
    watch_parent,
)
from solo_bayesncl.benchmark.progress import STAGES, StatusFile, read_status
from solo_bayesncl.benchmark.records import load_record, recorded_path
from solo_bayesncl.benchmark.stages import (
    StageUnfinished,
    ValidationPass,
    knn_stage,
    linear_stage,
    pretrain_other_rank,
    pretrain_stage,
    report_stage,
)
from solo_bayesncl.core.distributed import launched_as_rank_zero
from solo_bayesncl.core.threads import apply_threads
from solo_bayesncl.data.names import SCENES
from solo_bayesncl.evaluation.background import background_measures
from solo_bayesncl.io.files import write_text_replacing
from solo_bayesncl.io.json_text import json_text
from solo_bayesncl.training.auto_resume import ResumePoint, read_position, resume_order

__all__ = ["main", "run", "stopped_message"]

_STAGE_NAMES = {
    "pretrain": "pretraining",
    "linear": "the linear evaluation",
    "knn": "kNN",
    "report": "the report",
}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    # a stage's JSON never looks finished before it is; an undefined figure is written as null
    write_text_replacing(path, json_text(data))


def run(spec_path: Path) -> dict[str, Any]:
    """Runs every unfinished stage of the run described by ``spec_path``; returns its result (``{}``
    in the processes of ranks 1.. of a DDP pretraining, :func:`~.stages.pretrain_other_rank`)."""
    spec = RunOrder.from_json(spec_path.read_text())
    run_dir = spec_path.parent
    if spec.threads is not None:
        apply_threads(spec.threads)  # kNN and the report too; the fits apply it again
    if not launched_as_rank_zero():
        pretrain_other_rank(spec, run_dir)
        return {}
    # the processes Lightning starts for the other ranks watch this one, not the benchmark
    os.environ[PARENT_ENV] = str(os.getpid())
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
        stages[name] = load_record(
            path, f"the record of a finished {name} stage", f"the {name} stage runs again"
        )
        return stages[name]

    ckpt = stage("pretrain", lambda: pretrain_stage(spec, run_dir, status))["checkpoint"]
    stage("linear", lambda: linear_stage(spec, run_dir, ckpt, status))
    shared = ValidationPass(spec.report, ckpt)  # one pass over the validation images for both
    stage("knn", lambda: knn_stage(spec, ckpt, status, shared))
    report_json = run_dir / "report.json"
    if (
        spec.report.protocol == "paper"
        and report_json.is_file()
        and not json.loads(report_json.read_text()).get("metrics_paper")
    ):
        report_json.unlink()  # a standard report: the paper figures are the missing stage
    report = stage("report", lambda: report_stage(spec, run_dir, ckpt, status, shared))
    background_json = run_dir / "background.json"
    if report.get("dataset") == SCENES and not background_json.is_file():
        status.update(stage="report")
        _write_json(background_json, background_measures(ckpt))

    commits = sorted({s["commit"] for s in stages.values()})
    pretrain = stages["pretrain"]
    result = {
        "method": spec.method,
        "variant": spec.variant,
        "seed": spec.seed,
        "run_key": spec.run_key,
        **{k: v for k, v in pretrain.items() if k not in ("metrics_csv", "timing", "commit")},
        # the run's own files by their place in its folder (benchmark.records)
        "checkpoint": recorded_path(run_dir, pretrain["checkpoint"]),
        "pretrain_metrics_csv": recorded_path(run_dir, pretrain["metrics_csv"]),
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
        if result.get("probe_top1") is None:  # the same probe, fitted on the last checkpoint
            result["probe_top1"] = result["background"].get("probe_class_top1")
    _write_json(run_dir / "result.json", result)
    status.update(stage="done")
    return result


def _pretraining_resume_point(run_dir: Path) -> ResumePoint | None:
    """Where the next sitting resumes pretraining: the furthest readable checkpoint."""
    for path in resume_order(list((run_dir / "pretrain").glob("*/*/*.ckpt"))):
        point = read_position(path)
        if point is not None:
            return point
    return None


def stopped_message(run_dir: Path, signal_name: str) -> str:
    """What a run stopped by ``signal_name`` says: the stage, what is kept, where it continues."""
    stage = read_status(run_dir / "status.json").get("stage")
    if stage not in STAGES:
        stage = "pretrain"
    kept = [_STAGE_NAMES[s] for s in STAGES if (run_dir / f"{s}.json").is_file()]
    text = f"run stopped ({signal_name}) in {_STAGE_NAMES[stage]}; "
    if kept:
        text += f"{' and '.join(kept)} finished and {'is' if len(kept) == 1 else 'are'} kept; "
    if stage == "pretrain":
        point = _pretraining_resume_point(run_dir)
        text += (
            "its checkpoints are kept and the next run of the same command resumes from "
            f"{point.phrase()}"
            if point is not None
            else "it saved no checkpoint yet, so the next run of the same command starts it anew"
        )
    else:
        text += f"the next run of the same command starts {_STAGE_NAMES[stage]} again"
    return text + "; no result is recorded for an unfinished stage"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    handle_sigterm()
    watch_parent()
    run_dir = Path(args[0]).parent
    try:
        run(Path(args[0]))
    except KeyboardInterrupt:
        print(stopped_message(run_dir, "SIGINT"), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print(stopped_message(run_dir, "SIGTERM"), file=sys.stderr)
        return EXIT_TERMINATED
    except StageUnfinished as err:
        print(f"run unfinished: {err}", file=sys.stderr)
        return EXIT_UNFINISHED
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

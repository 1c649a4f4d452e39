"""A stopped benchmark run says what is kept and where the next run of the same command goes on,
never that nothing was saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import run_order

pytest.importorskip("lightning", reason="needs Lightning (installed with solo-learn)")

from solo_bayesncl.benchmark import run_one  # noqa: E402
from solo_bayesncl.benchmark.process import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated  # noqa: E402
from solo_bayesncl.benchmark.run_one import stopped_message  # noqa: E402

TAIL = "; no result is recorded for an unfinished stage"


def _checkpoint(folder: Path, name: str, step: int, epochs: tuple[int, int], batches: int):
    folder.mkdir(parents=True, exist_ok=True)
    loops = {
        "fit_loop": {
            "epoch_progress": {"current": {"ready": epochs[0], "processed": epochs[1]}},
            "epoch_loop.batch_progress": {"current": {"processed": batches}},
        }
    }
    torch.save({"global_step": step, "loops": loops}, folder / name)
    return folder / name


def _run_dir(tmp_path: Path, stage: str | None) -> Path:
    run_dir = tmp_path / "runs" / "bayesncl-seed5-abc"
    run_dir.mkdir(parents=True)
    if stage is not None:
        (run_dir / "status.json").write_text(json.dumps({"stage": stage, "time": 0}))
    return run_dir


def test_stopped_in_pretraining_names_the_step_the_next_run_resumes_from(tmp_path):
    run_dir = _run_dir(tmp_path, "pretrain")
    sitting = run_dir / "pretrain" / "bayesncl" / "offline-a"
    _checkpoint(sitting, "r-offline-a-ep=2.ckpt", 57, (3, 3), 19)
    _checkpoint(sitting, "r-offline-a-ep=3-step=64.ckpt", 64, (4, 3), 7)
    assert stopped_message(run_dir, "SIGINT") == (
        "run stopped (SIGINT) in pretraining; its checkpoints are kept and the next run of the "
        "same command resumes from epoch 3, step 64" + TAIL
    )
    # a checkpoint cut short by the stop is passed over, as auto-resume does
    cut = _checkpoint(sitting, "r-offline-a-ep=3-step=70.ckpt", 70, (4, 3), 13)
    cut.write_bytes(cut.read_bytes()[:40])
    assert "resumes from epoch 3, step 64;" in stopped_message(run_dir, "SIGTERM")


def test_stopped_before_the_first_checkpoint_says_pretraining_starts_anew(tmp_path):
    run_dir = _run_dir(tmp_path, None)  # stopped while it was starting
    assert stopped_message(run_dir, "SIGTERM") == (
        "run stopped (SIGTERM) in pretraining; it saved no checkpoint yet, so the next run of "
        "the same command starts it anew" + TAIL
    )


def test_stopped_in_a_later_stage_says_what_finished_and_what_starts_again(tmp_path):
    run_dir = _run_dir(tmp_path, "knn")
    for stage in ("pretrain", "linear"):
        (run_dir / f"{stage}.json").write_text("{}")
    assert stopped_message(run_dir, "SIGINT") == (
        "run stopped (SIGINT) in kNN; pretraining and the linear evaluation finished and are "
        "kept; the next run of the same command starts kNN again" + TAIL
    )


@pytest.mark.parametrize(
    ("raised", "code", "name"),
    [(KeyboardInterrupt, EXIT_INTERRUPTED, "SIGINT"), (Terminated, EXIT_TERMINATED, "SIGTERM")],
)
def test_the_run_process_prints_it_once_with_its_exit_status(
    tmp_path, monkeypatch, capsys, raised, code, name
):
    run_dir = _run_dir(tmp_path, "linear")
    (run_dir / "pretrain.json").write_text("{}")
    (run_dir / "spec.json").write_text("{}")

    def stopped(spec_path: Path) -> None:
        raise raised

    monkeypatch.setattr(run_one, "run", stopped)
    monkeypatch.setattr(run_one, "handle_sigterm", lambda: None)
    monkeypatch.setattr(run_one, "watch_parent", lambda: None)
    assert run_one.main([str(run_dir / "spec.json")]) == code
    err = capsys.readouterr().err
    assert err == (
        f"run stopped ({name}) in the linear evaluation; pretraining finished and is kept; the "
        "next run of the same command starts the linear evaluation again" + TAIL + "\n"
    )
    assert "nothing" not in err


def test_a_finished_runs_records_are_strict_json_with_undefined_figures_as_null(
    tmp_path, monkeypatch
):
    # every gate of a concrete-gate run open: its open-rate/lift correlation is undefined
    run_dir = tmp_path / "runs" / "bayesncl_concrete-seed1-abc"
    ckpt = run_dir / "pretrain" / "m" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"weights")
    order = run_order(method="bayesncl", variant="bayesncl_concrete", seed=1, run_key="abc")
    (run_dir / "spec.json").write_text(order.to_json())
    pretrain = {"checkpoint": str(ckpt), "metrics_csv": str(ckpt.parent / "metrics.csv")}
    monkeypatch.setattr(run_one, "launched_as_rank_zero", lambda: True)
    monkeypatch.setattr(run_one, "pretrain_stage", lambda *a: dict(pretrain))
    monkeypatch.setattr(run_one, "linear_stage", lambda *a: {"linear_top1": 70.0})
    monkeypatch.setattr(run_one, "ValidationPass", lambda *a: None)
    monkeypatch.setattr(run_one, "knn_stage", lambda *a: {"knn_top1": 68.5})
    report = {"dataset": run_one.SCENES, "metrics": {"semantic_consistency": 0.5}}
    monkeypatch.setattr(run_one, "report_stage", lambda *a: dict(report))
    measured = {"background_dims_share": 0.75, "open_rate_lift_correlation": float("nan")}
    monkeypatch.setattr(run_one, "background_measures", lambda _ckpt: dict(measured))

    result = run_one.run(run_dir / "spec.json")

    def refuse(word: str):
        raise ValueError(f"{word} is not JSON")

    for name in ("background.json", "result.json"):
        kept = json.loads((run_dir / name).read_text(), parse_constant=refuse)
        background = kept if name == "background.json" else kept["background"]
        assert background == {"background_dims_share": 0.75, "open_rate_lift_correlation": None}
    assert result["background"]["open_rate_lift_correlation"] is None
    assert result["knn_top1"] == 68.5 and result["checkpoint"] == "pretrain/m/last.ckpt"


def test_a_half_written_stage_record_is_named_with_what_to_do(tmp_path, monkeypatch):
    """A finished stage's record cut short (a copy stopped half-way, a full disk) fails the run
    with one line naming it and saying that removing it runs that stage again."""
    from solo_bayesncl.benchmark.records import RecordsError

    run_dir = tmp_path / "runs" / "ncl-seed1-abc"
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(run_order(method="ncl", seed=1, run_key="abc").to_json())
    (run_dir / "pretrain.json").write_text('{"checkpoint": "pretrain/m/la')
    monkeypatch.setattr(run_one, "launched_as_rank_zero", lambda: True)
    monkeypatch.setattr(run_one, "pretrain_stage", lambda *a: pytest.fail("not trained again"))
    with pytest.raises(RecordsError) as info:
        run_one.run(run_dir / "spec.json")
    assert str(info.value) == (
        f"{run_dir / 'pretrain.json'}: not the record of a finished pretrain stage (not valid "
        "JSON at line 1 column 16: Unterminated string starting at); it was cut short or edited: "
        "restore it, or remove it and the pretrain stage runs again"
    )

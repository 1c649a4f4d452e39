"""A finished run's records (benchmark.records): the files they name are found after the results
folder moved and they are written without machine paths (that version control keeps exactly
them in the study's records: study/tests/test_study_records.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solo_bayesncl.benchmark.records import (
    RUN_RECORDS,
    RecordsError,
    add_commit_lines,
    keep_run_records,
    located,
    read_result,
    recorded_path,
)


def test_a_relative_name_is_read_against_the_run_folder(tmp_path):
    run = tmp_path / "runs" / "ncl-seed1-abc"
    assert located(run, "pretrain_metrics.csv") == run / "pretrain_metrics.csv"
    assert located(run, "pretrain/ncl/x/last.ckpt") == run / "pretrain/ncl/x/last.ckpt"


def test_an_absolute_name_from_another_machine_is_found_below_the_run_folder(tmp_path):
    run = tmp_path / "here" / "runs" / "ncl-seed1-abc"
    # trained elsewhere, in a folder whose own path repeats the run's name further up
    recorded = "/elsewhere/ncl-seed1-abc/out/runs/ncl-seed1-abc/pretrain/ncl/x/last.ckpt"
    assert located(run, recorded) == run / "pretrain/ncl/x/last.ckpt"


def test_an_absolute_name_that_exists_or_lies_outside_any_run_folder_is_kept(tmp_path):
    run = tmp_path / "runs" / "ncl-seed1-abc"
    existing = tmp_path / "ncl-seed1-abc.ckpt"
    existing.write_text("x")
    assert located(run, existing) == existing
    assert located(run, "/somewhere/else/last.ckpt") == Path("/somewhere/else/last.ckpt")


def test_recorded_names_are_relative_to_the_run_folder_even_through_a_link(tmp_path):
    real = tmp_path / "study_budget" / "runs"
    (real / "r1" / "pretrain").mkdir(parents=True)
    ckpt = real / "r1" / "pretrain" / "last.ckpt"
    ckpt.write_text("x")
    (tmp_path / "study_budget_sweep").mkdir()
    (tmp_path / "study_budget_sweep" / "runs").symlink_to(real)
    linked_run = tmp_path / "study_budget_sweep" / "runs" / "r1"
    assert recorded_path(linked_run, ckpt) == "pretrain/last.ckpt"
    assert recorded_path(linked_run, linked_run / "pretrain" / "last.ckpt") == "pretrain/last.ckpt"
    outside = tmp_path / "elsewhere.ckpt"
    assert recorded_path(linked_run, outside) == str(outside)


def test_read_result_resolves_both_kinds_of_record(tmp_path):
    run = tmp_path / "copied" / "runs" / "bayesncl-seed2-k"
    run.mkdir(parents=True)
    (run / "result.json").write_text(
        json.dumps(
            {
                "method": "bayesncl",
                "seed": 2,
                "checkpoint": "/old/results/runs/bayesncl-seed2-k/pretrain/a.ckpt",
                "pretrain_metrics_csv": "pretrain_metrics.csv",
                "knn_top1": 50.0,
            }
        )
    )
    result = read_result(run)
    assert result["checkpoint"] == str(run / "pretrain" / "a.ckpt")
    assert result["pretrain_metrics_csv"] == str(run / "pretrain_metrics.csv")
    assert result["knn_top1"] == 50.0


def _trained_run(folder: Path, seed: int = 1, dirty=False, **extra) -> Path:
    """A finished run folder as the benchmark leaves it: records beside a checkpoint and a log."""
    folder.mkdir(parents=True)
    result = {"method": "ncl", "seed": seed, "commit": "c0ffee", "dirty": dirty, **extra}
    (folder / "result.json").write_text(json.dumps(result))
    (folder / "pretrain_metrics.csv").write_text("epoch,interp/consistency_gain\n9,0.2\n")
    (folder / "log.txt").write_text("training log")
    (folder / "pretrain").mkdir()
    (folder / "pretrain" / "last.ckpt").write_bytes(b"weights")
    return folder


def test_keeping_a_run_copies_its_records_only_and_is_idempotent(tmp_path):
    source = _trained_run(tmp_path / "trained" / "runs" / "ncl-seed1-k")
    kept = tmp_path / "kept" / "runs" / "ncl-seed1-k"
    assert keep_run_records(source, kept) == ["pretrain_metrics.csv", "result.json"]
    assert sorted(p.name for p in kept.iterdir()) == ["pretrain_metrics.csv", "result.json"]
    for name in ("pretrain_metrics.csv", "result.json"):
        assert (kept / name).read_bytes() == (source / name).read_bytes()
    assert keep_run_records(source, kept) == []  # already kept
    # gate measures computed afterwards in the training folder join the kept records
    (source / "gate_measures.json").write_text('{"open_rate_class_dims": 0.2}')
    assert keep_run_records(source, kept) == ["gate_measures.json"]
    assert set(RUN_RECORDS) == {p.name for p in kept.iterdir()}


def test_a_kept_record_that_differs_is_never_replaced(tmp_path):
    source = _trained_run(tmp_path / "trained" / "runs" / "ncl-seed1-k")
    kept = tmp_path / "kept" / "runs" / "ncl-seed1-k"
    kept.mkdir(parents=True)
    (kept / "pretrain_metrics.csv").write_text("epoch\n1\n")
    (kept / "result.json").write_text('{"method": "ncl", "seed": 1, "knn_top1": 50.0}')
    with pytest.raises(RecordsError, match=r"result.json differs from .*never replaced"):
        keep_run_records(source, kept)
    # checked before writing: the differing metrics file was not copied either
    assert (kept / "pretrain_metrics.csv").read_text() == "epoch\n1\n"
    assert json.loads((kept / "result.json").read_text())["knn_top1"] == 50.0


@pytest.mark.parametrize("dirty", [True, "unknown", None])
def test_a_run_not_trained_from_a_commit_or_not_finished_is_not_kept(tmp_path, dirty):
    source = _trained_run(tmp_path / "trained" / "runs" / "ncl-seed1-k", dirty=dirty)
    kept = tmp_path / "kept" / "runs" / "ncl-seed1-k"
    with pytest.raises(RecordsError, match="was not trained from a commit"):
        keep_run_records(source, kept)
    (source / "result.json").unlink()
    with pytest.raises(RecordsError, match=r"not finished \(no result.json\)"):
        keep_run_records(source, kept)
    assert not kept.exists()


def test_commit_lines_are_added_once_after_the_kept_ones(tmp_path):
    (tmp_path / "COMMIT").write_text("aaa ncl seed 1\n")
    results = [
        {"method": "ncl", "seed": 1, "commit": "aaa"},
        {"method": "bayesncl", "variant": "bayesncl_rho0.3", "seed": 2, "commit": "bbb"},
        {"method": "bayesncl", "variant": "bayesncl_rho0.3", "seed": 2, "commit": "bbb"},
    ]
    assert add_commit_lines(tmp_path, results) == ["bbb bayesncl_rho0.3 seed 2"]
    assert (tmp_path / "COMMIT").read_text() == "aaa ncl seed 1\nbbb bayesncl_rho0.3 seed 2\n"
    assert add_commit_lines(tmp_path, results) == []
    assert add_commit_lines(tmp_path / "new", results[:1]) == ["aaa ncl seed 1"]


def test_a_change_to_kept_records_or_docs_leaves_the_commit_clean_and_code_does_not(tmp_path):
    """``git_state`` counts a change as dirty only where a run reads it: kept records in any
    ``records/`` folder (a study's among them), results and documentation do not count."""
    import subprocess

    from solo_bayesncl.benchmark.machine import git_state

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    files = [
        "code.py",
        "study/records/p/runs/r/result.json",
        "records/q/COMMIT",
        "results/cpu/results.md",
        "docs/x.txt",
    ]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    for name in files[1:]:
        (tmp_path / name).write_text("2\n")
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("2\n")
    assert git_state(tmp_path)["dirty"] is True

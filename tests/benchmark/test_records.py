"""A finished run's records (benchmark.records): the files they name are found after the results
folder moved, they are written without machine paths, and version control keeps exactly them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from solo_bayesncl.benchmark.presets import available_presets, load_preset
from solo_bayesncl.benchmark.records import (
    RUN_RECORDS,
    RecordsError,
    add_commit_lines,
    keep_run_records,
    located,
    read_result,
    recorded_path,
)

REPO = Path(__file__).resolve().parents[2]


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


def _ignored(paths: list[str]) -> set[str]:
    """The paths among ``paths`` that the repository's ignore rules exclude (whether tracked or
    not: ``--no-index``)."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(paths),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode not in (0, 1):  # 1: none is ignored
        pytest.skip(f"git check-ignore cannot run here: {done.stderr.strip()}")
    return set(done.stdout.split())


@pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(),
    reason="needs git and the repository's own checkout",
)
def test_version_control_keeps_every_presets_tables_and_run_records_but_no_checkpoint():
    folders = sorted(
        {
            f"results/{load_preset(name).out_dir.name}"
            for name in available_presets()
            if load_preset(name).out_dir.parent.name == "results"
        }
    )
    assert "results/study_budget_long" in folders and "results/study_budget_sweep" in folders
    # a folder whose runs are another's (a link, as run_budget_study.sh makes) keeps the link;
    # the records are kept, and checked, where it points
    linked = [folder for folder in folders if (REPO / folder / "runs").is_symlink()]
    own = [folder for folder in folders if folder not in linked]
    run = "runs/ncl-seed1-0123456789ab"
    kept = (
        [
            f"{folder}/{name}"
            for folder in folders
            for name in ("results.csv", "results.md", "budget.md", "budget_curves.png", "COMMIT")
        ]
        + [f"{folder}/{run}/{record}" for folder in own for record in RUN_RECORDS]
        + [f"{folder}/runs" for folder in linked]
    )
    dropped = [
        f"{folder}/{run}/{name}"
        for folder in own
        for name in (
            "log.txt",
            "spec.json",
            "status.json",
            "pretrain.json",
            "lock",
            "pretrain/ncl/offline-1/args.json",
            "pretrain/ncl/offline-1/ncl-ep=49.ckpt",
        )
    ] + [f"{folder}/log.txt" for folder in folders]
    assert "results/study_budget_long" in linked
    ignored = _ignored(kept + dropped)
    assert sorted(p for p in kept if p in ignored) == []
    assert sorted(p for p in dropped if p not in ignored) == []


def test_every_kept_run_is_a_run_of_its_folders_preset_as_it_is_now():
    """The records under results/<preset>/runs/ are what that preset's tables are rebuilt from
    (--table-only), so each must be named by the current run key of the preset or of one whose
    runs folder links there (the sweep's runs are kept in study_budget's): a preset edited
    without its runs (the study's budget going from 50 to 100 epochs, say) would otherwise drop
    them from its tables without a word."""
    from solo_bayesncl.benchmark.runner import run_key

    def runs_folder(preset) -> Path:
        return REPO / "results" / preset.out_dir.name / "runs"

    presets = [load_preset(name) for name in available_presets()]
    presets = [p for p in presets if p.out_dir.parent.name == "results"]
    checked = 0
    for preset in presets:
        runs = runs_folder(preset)
        if not runs.is_dir() or runs.is_symlink():
            continue  # a linked runs folder is another preset's, checked with that preset
        # the presets whose runs folder links here (the sweep's, the mechanism's) share it
        sharing = [p for p in presets if runs_folder(p).resolve() == runs.resolve()]
        expected = {
            f"{method}-seed{seed}-{run_key(p, method, seed)}"
            for p in sharing
            for method in p.methods
            for seed in p.seeds
        }
        kept = {p.parent.name for p in runs.glob("*/result.json")}
        assert kept <= expected, (
            f"{preset.name}: runs of no setting of the preset: {kept - expected}"
        )
        checked += len(kept)
    assert checked >= 2  # the 100-epoch check's two runs, kept in results/study_budget_scenes/

"""Version control keeps exactly the study's records (each run's records, never a checkpoint),
and every kept run is a run of its folder's preset as the preset is now."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from solo_bayesncl.benchmark.presets import Preset, load_preset
from solo_bayesncl.benchmark.records import RUN_RECORDS
from solo_bayesncl.benchmark.runner import run_key
from study import RECORDS, preset_file, study_presets

REPO = Path(__file__).resolve().parents[2]


def _recorded_presets() -> list[tuple[Preset, Path]]:
    """Each preset whose records the study keeps, with their folder: the study's presets (their
    out_dir) and the shipped cpu preset, whose reference table the study keeps in
    study/records/cpu."""
    found = [(load_preset("cpu"), RECORDS / "cpu")]
    for name in study_presets():
        preset = load_preset(preset_file(name))
        assert preset.out_dir.resolve() == RECORDS / name, name
        found.append((preset, RECORDS / name))
    return found


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
    folders = sorted(f"study/records/{folder.name}" for _, folder in _recorded_presets())
    assert "study/records/cpu" in folders
    assert "study/records/study_budget_long" in folders
    assert "study/records/study_budget_sweep" in folders
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
    assert "study/records/study_budget_long" in linked
    ignored = _ignored(kept + dropped)
    assert sorted(p for p in kept if p in ignored) == []
    assert sorted(p for p in dropped if p not in ignored) == []


def test_every_kept_run_is_a_run_of_its_folders_preset_as_it_is_now():
    """The records under study/records/<preset>/runs/ are what that preset's tables are rebuilt
    from (--table-only), so each must be named by the current run key of the preset or of one
    whose runs folder links there (the sweep's runs are kept in study_budget's): a preset edited
    without its runs (the study's budget going from 50 to 100 epochs, say) would otherwise drop
    them from its tables without a word."""
    recorded = _recorded_presets()
    checked = 0
    for preset, folder in recorded:
        runs = folder / "runs"
        if not runs.is_dir() or runs.is_symlink():
            continue  # a linked runs folder is another preset's, checked with that preset
        # the presets whose runs folder links here (the sweep's, the mechanism's) share it
        sharing = [p for p, f in recorded if (f / "runs").resolve() == runs.resolve()]
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
    assert checked >= 2  # the 100-epoch check's two runs, kept in study_budget_scenes/


def test_the_study_records_a_benchmark_rewrote_do_not_make_the_code_dirty(tmp_path):
    """A study preset rewrites its tables in study/records/ after every seed: the next run's
    commit is not dirty for it, while a change to the study's code or presets is."""
    from solo_bayesncl.benchmark.machine import git_state

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t.invalid")
    files = [
        "study/records/s/results.md",
        "study/log.md",
        "study/budget.py",
        "study/presets/s.yaml",
    ]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, env=env)
    for name in files[:2]:
        (tmp_path / name).write_text("b")
    assert git_state(tmp_path)["dirty"] is False
    for name in files[2:]:
        (tmp_path / name).write_text("b")
        assert git_state(tmp_path)["dirty"] is True, name
        subprocess.run(["git", "checkout", "-q", name], cwd=tmp_path, check=True)

"""The side-by-side benchmark: presets, table writing from known results, and a tiny preset run
end to end for the four methods (skipped without solo-learn), then skipped on a second call."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from helpers import fake_result, tiny_preset_file

from solo_bayesncl.benchmark.presets import available_presets, load_preset
from solo_bayesncl.benchmark.records import RUN_RECORDS
from solo_bayesncl.benchmark.table import aggregate, write_csv, write_markdown


def test_table_from_known_results(tmp_path):
    results = [
        fake_result("bayesncl", 5, 0.2, 80.0),
        fake_result("bayesncl", 6, 0.4, 82.0),
        fake_result("simclr", 5, 0.0, 79.0),
    ]
    rows = aggregate(results)
    assert [r["method"] for r in rows] == ["simclr", "bayesncl"]  # the canonical method order
    bayes = rows[1]
    assert bayes["linear_top1"] == pytest.approx(81.0) and bayes[
        "linear_top1_std"
    ] == pytest.approx(2**0.5)
    assert bayes["consistency_gain"] == pytest.approx(0.3)
    md = write_markdown(rows, tmp_path / "t.md", "unit", "abc1234", "2026-11-30").read_text()
    assert "Benchmark preset `unit`, commit `abc1234`, 2026-11-30." in md
    assert (
        "| simclr | 1 | 79.00 | 78.00 | 0.300 | 0.300 | 0.000 | 1.500 | 100 | 0.500 | 40.0 | 0.700 | 10.0 | 1000 |"
        in md
    )
    assert (
        "| bayesncl | 2 | 81.00 ± 1.41 | 80.00 ± 1.41 | 0.600 ± 0.141 | 0.300 ± 0.000 | 0.300 ± 0.141 |"
        in md
    )
    with open(write_csv(rows, tmp_path / "t.csv", "abc1234", "2026-11-30"), newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["method"] for r in table] == ["simclr", "bayesncl"]
    assert float(table[1]["knn_top1"]) == pytest.approx(80.0) and table[1]["commit"] == "abc1234"
    assert [(r["seeds"], r["seed_list"]) for r in table] == [("1", "5"), ("2", "5 6")]


def test_shipped_presets_load():
    assert set(available_presets()) == {"cpu", "cifar100", "imagenet100"}  # no study preset
    cpu = load_preset("cpu")
    assert cpu.methods == ["simclr", "mocov2plus", "ncl", "bayesncl"]
    assert "data.dataset=fashion-mnist" in cpu.overrides


def test_paper_presets_run_bayesncl_at_the_official_setting():
    """The paper presets reproduce the paper: BayesNCL at the config's official prior and KL
    weight, with no override of either (the cpu preset follows the study instead,
    study/tests/test_benchmark_study.py)."""
    import yaml

    for name in ("cifar100", "imagenet100"):
        preset = load_preset(name)
        assert not any("bayesian" in o for o in preset.run_overrides("bayesncl")), name
        config = yaml.safe_load((preset.config_dir / "bayesncl.yaml").read_text())
        kwargs = config["method_kwargs"]
        assert (kwargs["bayesian_prior_prob"], kwargs["bayesian_kl_lambda"]) == (0.8, 3.0e-5)


def test_bad_presets_are_named(tmp_path):
    with pytest.raises(ValueError, match="preset 'nope' does not exist; available: .*cpu"):
        load_preset("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("methods: [simclr, byol]\n")
    with pytest.raises(
        ValueError,
        match="methods contains 'byol'; allowed values: simclr, mocov2plus, ncl, bayesncl",
    ):
        load_preset(bad)
    bad.write_text("epochs: 3\n")
    with pytest.raises(ValueError, match="unknown key 'epochs'"):
        load_preset(bad)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.solo
def test_tiny_preset_runs_all_methods_then_skips(image_folder, tmp_path):
    from solo_bayesncl.benchmark.runner import run_benchmark, write_tables

    preset_file = tiny_preset_file(
        tmp_path / "tiny.yaml",
        image_folder,
        tmp_path / "results",
        methods=("simclr", "mocov2plus", "ncl", "bayesncl"),
        extra_overrides=("interpretability.enabled=True", "interpretability.frequency=1"),
        method_overrides={"mocov2plus": ["method_kwargs.queue_size=64"]},
    )
    preset = load_preset(preset_file)
    log: list[str] = []
    results = run_benchmark(preset, log=log.append)
    assert sorted(r["method"] for r in results) == ["bayesncl", "mocov2plus", "ncl", "simclr"]
    out = tmp_path / "results"
    for name in (
        "results.md",
        "results.csv",
        "accuracy_vs_consistency.png",
        "metrics_over_epochs.png",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    for r in results:
        assert 0 <= r["linear_top1"] <= 100 and 0 <= r["knn_top1"] <= 100
        assert r["seconds_per_epoch"] > 0 and r["peak_memory_mb"] > 0
        assert 0 <= r["metrics"]["semantic_consistency"] <= 1
    md = (out / "results.md").read_text()
    assert all(f"| {m} | 1 |" in md for m in ("simclr", "mocov2plus", "ncl", "bayesncl"))

    stamps = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/result.json")}
    log.clear()
    again = run_benchmark(preset, log=log.append)
    assert sum(line.startswith("[skip]") for line in log) == 4
    assert not any(line.startswith("[run]") for line in log)
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/result.json")} == stamps
    assert json.dumps(again, sort_keys=True) == json.dumps(results, sort_keys=True)
    assert all(Path(r["checkpoint"]).is_file() for r in again)

    # the records alone (what version control keeps) give the same table on another machine,
    # and name no path of this one
    copy = tmp_path / "elsewhere" / "results"
    for run in out.glob("runs/*"):
        raw = (run / "result.json").read_text()
        assert str(tmp_path) not in raw, run.name
        (copy / "runs" / run.name).mkdir(parents=True)
        for record in RUN_RECORDS:
            if (run / record).is_file():
                shutil.copy2(run / record, copy / "runs" / run.name / record)
    write_tables(preset, copy, log=lambda _: None)
    assert (copy / "results.md").read_text() == md
    assert (copy / "metrics_over_epochs.png").stat().st_size > 0  # the curves came along
    assert (copy / "results.csv").read_text() == (out / "results.csv").read_text()

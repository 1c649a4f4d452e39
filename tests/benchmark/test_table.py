"""Seed aggregation, paired differences with t-intervals, preset variants, the spread-aware plots
and the background measures' pieces, from known values."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, fake_result

from solo_bayesncl.benchmark.paired import mean_interval, paired_differences, t_quantile_975
from solo_bayesncl.benchmark.presets import load_preset
from solo_bayesncl.benchmark.runner import run_key
from solo_bayesncl.benchmark.table import aggregate, write_markdown, write_paired_csv


def test_t_quantiles():
    assert t_quantile_975(1) == pytest.approx(12.7062047)  # printed tables' values, to 1e-7
    assert t_quantile_975(4) == pytest.approx(2.7764451)  # not 2.776: a bound moves a digit
    assert t_quantile_975(30) == pytest.approx(2.0422725)
    stats = pytest.importorskip("scipy.stats")
    for dof in (31, 45, 120, 1000):
        assert t_quantile_975(dof) == pytest.approx(stats.t.ppf(0.975, dof), abs=1e-3)
    with pytest.raises(ValueError, match="degrees of freedom must be >= 1, got 0"):
        t_quantile_975(0)


def test_paired_differences_use_the_same_seeds_and_a_t_interval(tmp_path):
    results = [
        fake_result("ncl", 1, 0.20),
        fake_result("ncl", 2, 0.30),
        fake_result("ncl", 3, 0.25),
        fake_result("bayesncl", 1, 0.25),
        fake_result("bayesncl", 2, 0.32),
        fake_result("bayesncl", 3, 0.33),
        fake_result("bayesncl", 4, 0.90),  # no NCL run with seed 4: not paired
        fake_result("bayesncl", 1, 0.20, variant="bayesncl_rho0.3"),
        fake_result("bayesncl", 2, 0.30, variant="bayesncl_rho0.3"),
    ]
    paired = paired_differences(results)
    gain = next(
        p for p in paired if p["method"] == "bayesncl" and p["column"] == "consistency_gain"
    )
    # differences 0.05, 0.02, 0.08: mean 0.05, sample std 0.03, t(2) = 4.3026527
    assert gain["n"] == 3 and gain["seeds"] == "1 2 3"
    assert gain["mean_diff"] == pytest.approx(0.05)
    assert gain["std_diff"] == pytest.approx(0.03)
    half = 4.3026527 * 0.03 / math.sqrt(3)
    assert (gain["ci_low"], gain["ci_high"]) == pytest.approx((0.05 - half, 0.05 + half))
    same = next(
        p for p in paired if p["method"] == "bayesncl_rho0.3" and p["column"] == "consistency_gain"
    )
    assert same["mean_diff"] == pytest.approx(0.0) and same["n"] == 2
    assert paired_differences([r for r in results if r["method"] != "ncl"]) == []

    rows = aggregate(results)
    assert [r["method"] for r in rows] == ["ncl", "bayesncl", "bayesncl_rho0.3"]
    assert rows[2]["base_method"] == "bayesncl" and rows[2]["seeds"] == 2
    assert rows[1]["consistency_gain"] == pytest.approx((0.25 + 0.32 + 0.33 + 0.9) / 4)
    md = write_markdown(rows, tmp_path / "t.md", "unit", "abc", "2026-11-30", paired=paired)
    text = md.read_text()
    assert "| method - ncl | pairs | consistency_gain |" in text
    assert f"| bayesncl | 3 | +0.050 [{0.05 - half:+.3f}, {0.05 + half:+.3f}] |" in text
    assert "gates_open" not in text and "bg_consistency_gain" not in text  # nothing to show
    with open(write_paired_csv(paired, tmp_path / "p.csv", "abc"), newline="") as f:
        lines = list(csv.DictReader(f))
    assert {(line["method"], line["column"]) for line in lines} >= {
        ("bayesncl", "consistency_gain"),
        ("bayesncl_rho0.3", "linear_top1"),
    }


def test_mean_interval_of_one_value_has_no_spread_and_of_none_is_an_error():
    one = mean_interval([0.25])
    assert one["mean"] == 0.25 and one["n"] == 1
    assert math.isnan(one["std"]) and math.isnan(one["low"]) and math.isnan(one["high"])
    with pytest.raises(ValueError, match="at least one value"):
        mean_interval([])


def test_an_interval_that_excludes_zero_is_marked(tmp_path):
    results = [fake_result("ncl", s, 0.2 + 0.01 * s) for s in (1, 2, 3)] + [
        fake_result(
            "bayesncl", s, 0.3 + 0.012 * s, gate_open_rate={"mean": 0.4, "dims_never_open": s}
        )
        for s in (1, 2, 3)
    ]
    paired = paired_differences(results)
    text = write_markdown(
        aggregate(results), tmp_path / "t.md", "unit", "abc", "d", paired=paired
    ).read_text()
    assert "| bayesncl | 3 | +0.104 [+0.099, +0.109] * |" in text
    assert "gates_open" in text and "| 0.400 ± 0.000 | 2 ± 1 |" in text


def test_a_difference_equal_on_every_pair_is_not_marked_as_beyond_noise(tmp_path):
    """Two seeds whose difference is the same (here 0.05 apart on each, as two accuracies one
    image apart can be) give a zero-width t-interval: shown as no spread, never marked ``*``."""
    results = [fake_result("ncl", s, g) for s, g in ((1, 0.30), (2, 0.25))] + [
        fake_result("bayesncl", s, g) for s, g in ((1, 0.35), (2, 0.30))
    ]
    paired = paired_differences(results)
    gain = next(p for p in paired if p["column"] == "consistency_gain")
    assert gain["std_diff"] == pytest.approx(0.0, abs=1e-12) and gain["n"] == 2
    text = write_markdown(
        aggregate(results), tmp_path / "t.md", "unit", "abc", "d", paired=paired
    ).read_text()
    assert "| bayesncl | 2 | +0.050 (no spread) |" in text
    assert "`(no spread)`: the same on every pair, so no interval." in text


def test_background_columns_appear_for_scenes_runs(tmp_path):
    bg = {
        "background_consistency_gain": 0.05,
        "background_dims_share": 0.25,
        "probe_class_top1": 70.0,
        "probe_background_top1": 99.0,
    }
    results = [fake_result("ncl", 1, 0.2, background=bg)]
    text = write_markdown(aggregate(results), tmp_path / "t.md", "u", "c", "d").read_text()
    assert "bg_consistency_gain" in text and "| ncl | 1 |" in text and "| 0.050 | 0.250 |" in text
    assert "Background measures (fashion-mnist-scenes)" in text
    assert "_open_rate" not in text and "The gate (gated methods" not in text


def test_gate_columns_appear_for_gated_scenes_runs(tmp_path):
    bg = {
        "background_dims_share": 0.25,
        "ungated_background_dims_share": 0.5,
        "open_rate_background_dims": 0.125,
        "open_rate_class_dims": 0.75,
    }
    results = [
        fake_result("bayesncl", 1, 0.2, background=bg, gate_open_rate={"mean": 0.4}),
        fake_result("ncl", 1, 0.2, background={"background_dims_share": 0.5}),
    ]
    text = write_markdown(aggregate(results), tmp_path / "t.md", "u", "c", "d").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| method"))
    assert (
        "| bg_dims_share | bg_dims_share_ungated | bg_dims_open_rate | class_dims_open_rate |"
        in header
    )
    assert "| 0.250 | 0.500 | 0.125 | 0.750 |" in text
    assert "The gate (gated methods on fashion-mnist-scenes)" in text


def test_a_figure_only_some_seeds_have_says_how_many(tmp_path):
    """A gate probability taken from the checkpoints that still exist: the cell's mean and std
    are over those seeds, and it says how many, rather than passing for all of them."""
    bg = {"background_dims_share": 0.5, "open_rate_class_dims": 0.75}
    results = [
        fake_result("bayesncl", 1, 0.2, background={**bg, "gate_probability_class_dims": 0.5}),
        fake_result("bayesncl", 2, 0.2, background={**bg, "gate_probability_class_dims": 0.7}),
        fake_result("bayesncl", 3, 0.2, background=bg),
    ]
    rows = aggregate(results)
    assert rows[0]["class_dims_gate_prob_n"] == 2 and rows[0]["class_dims_open_rate_n"] == 3
    text = write_markdown(rows, tmp_path / "t.md", "u", "c", "d").read_text()
    assert "| 0.750 ± 0.000 | 0.600 ± 0.141 (n=2) |" in text
    assert "over n of them where only n have the figure" in text


def _preset(tmp_path, body: str):
    path = tmp_path / "p.yaml"
    path.write_text(f"config_dir: {REPO / 'scripts/pretrain/cifar'}\n" + body)
    return load_preset(path)


def test_variants_run_their_method_with_their_overrides(tmp_path):
    preset = _preset(
        tmp_path,
        """
methods: [ncl, bayesncl, bayesncl_rho0.3]
overrides: [max_epochs=1]
method_overrides: {bayesncl: [method_kwargs.gate_threshold=0.5]}
variants:
  bayesncl_rho0.3: {method: bayesncl, overrides: [method_kwargs.bayesian_prior_prob=0.3]}
""",
    )
    assert preset.base_method("bayesncl_rho0.3") == "bayesncl"
    assert preset.run_overrides("bayesncl_rho0.3") == [
        "max_epochs=1",
        "method_kwargs.gate_threshold=0.5",
        "method_kwargs.bayesian_prior_prob=0.3",
    ]
    assert preset.run_overrides("ncl") == ["max_epochs=1"]
    keys = {m: run_key(preset, m, 1) for m in preset.methods}
    assert len(set(keys.values())) == 3
    # a plain method's key is what it was before variants existed (finished runs stay finished)
    plain = _preset(
        tmp_path,
        "methods: [bayesncl]\noverrides: [max_epochs=1]\n"
        "method_overrides: {bayesncl: [method_kwargs.gate_threshold=0.5]}\n",
    )
    assert run_key(plain, "bayesncl", 1) == keys["bayesncl"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("variants: {ncl: {method: ncl}}\n", "variants.ncl: a variant name is"),
        ("variants: {x y: {method: ncl}}\n", "variants.x y: a variant name is"),
        ("variants: {v: {method: byol}}\n", "variants.v.method must be one of simclr"),
        ("variants: {v: {method: ncl, rho: 1}}\n", "variants.v must be {method: ..., overrides"),
        ("variants: {v: {method: ncl, overrides: a=1}}\n", "variants.v.overrides must be a list"),
        ("variants: [v]\n", "variants must map a name to"),
        (
            "methods: [ncl, v2]\nvariants: {v: {method: ncl}}\n",
            "methods contains 'v2'; allowed values: simclr, mocov2plus, ncl, bayesncl, v",
        ),
    ],
)
def test_bad_variants_are_named(tmp_path, body, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("[", r"\[")):
        _preset(tmp_path, body)


def _sweepfake_result(tmp_path, method, seed, rho, lam, gain):
    folder = tmp_path / f"{method}-{rho}-{lam}-{seed}"
    folder.mkdir()
    kwargs = {"bayesian_prior_prob": rho, "bayesian_kl_lambda": lam}
    (folder / "args.json").write_text(json.dumps({"method_kwargs": kwargs}))
    return fake_result(
        method,
        seed,
        gain,
        variant=f"{method}_{rho}_{lam}",
        checkpoint=str(folder / "last.ckpt"),
        gate_open_rate={"mean": rho / 2},
    )


def test_prior_sweep_plot_needs_a_sweep(tmp_path):
    from solo_bayesncl.benchmark.plots import (
        plot_accuracy_vs_consistency,
        plot_prior_sweep,
        prior_settings,
    )

    runs = [fake_result("ncl", s, 0.2) for s in (1, 2)]
    runs += [
        _sweepfake_result(tmp_path, "bayesncl", s, rho, lam, 0.2 + rho / 10)
        for s in (1, 2)
        for rho, lam in ((0.1, 3e-5), (0.3, 3e-5), (0.8, 3e-5), (0.3, 3e-3))
    ]
    assert prior_settings(runs[2]) == (0.1, 3e-5) and prior_settings(runs[0]) is None
    path = plot_prior_sweep(runs, tmp_path / "sweep.png")
    assert path is not None and path.stat().st_size > 10_000
    one = [r for r in runs if prior_settings(r) in (None, (0.8, 3e-5))]
    assert plot_prior_sweep(one, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
    assert plot_accuracy_vs_consistency(runs, tmp_path / "acc.png").stat().st_size > 10_000


@pytest.mark.parametrize("full", [False, True])
def test_a_run_without_the_kl_term_is_plotted_at_lambda_zero(tmp_path, full):
    from solo_bayesncl.benchmark.plots import prior_settings

    result = _sweepfake_result(tmp_path, "bayesncl", 1, 0.3, 3e-5, 0.2)
    args = Path(result["checkpoint"]).parent / "args.json"
    kwargs = json.loads(args.read_text())["method_kwargs"]
    kwargs["use_kl"] = False
    if full:  # a whole method_kwargs, as a run saves it
        kwargs.update(proj_hidden_dim=64, proj_output_dim=32)
    args.write_text(json.dumps({"method": "bayesncl", "method_kwargs": kwargs}))
    assert prior_settings(result) == (0.3, 0.0)


def test_background_share_compares_purity_above_chance():
    from solo_bayesncl.metrics.background import background_share

    # dim 0: class-pure; dim 1: background-pure; dim 2: both at chance -> not background;
    # dim 3: inactive (ignored)
    class_purity = np.array([1.0, 0.1, 0.1, 0.0])
    background_purity = np.array([0.25, 1.0, 0.25, 0.0])
    active = np.array([True, True, True, False])
    share, count = background_share(class_purity, background_purity, active, 10, 4)
    assert (share, count) == (pytest.approx(1 / 3), 1)
    # 0.55 class purity is 0.5 above chance; 0.7 of 4 backgrounds is 0.6 above chance
    assert background_share(np.array([0.55]), np.array([0.7]), np.array([True]), 10, 4)[1] == 1
    none = np.zeros(4, dtype=bool)
    assert math.isnan(background_share(class_purity, background_purity, none, 10, 4)[0])


def test_background_labels_follow_subsets():
    from torch.utils.data import Subset

    from solo_bayesncl.data.scenes import background_labels

    class Scenes:
        backgrounds = np.array([0, 1, 2, 3, 0, 1])

    nested = Subset(Subset(Scenes(), [5, 4, 3, 2]), [1, 3])
    assert background_labels(nested).tolist() == [0, 2]
    with pytest.raises(ValueError, match="no background labels"):
        background_labels(Subset([1, 2, 3], [0]))


@pytest.mark.solo
def test_table_only_counts_finished_runs_and_lists_the_rest(tmp_path):
    from solo_bayesncl.benchmark.runner import write_tables
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path, "methods: [ncl, bayesncl]\nseeds: [1, 2]\n")
    out = tmp_path / "out"
    for method, seed, gain in (("ncl", 1, 0.2), ("ncl", 2, 0.3), ("bayesncl", 1, 0.25)):
        run_dir = out / "runs" / f"{method}-seed{seed}-{run_key(preset, method, seed)}"
        run_dir.mkdir(parents=True)
        (run_dir / "result.json").write_text(json.dumps(fake_result(method, seed, gain)))
    # an unfinished run: stages but no result.json
    unfinished = out / "runs" / f"bayesncl-seed2-{run_key(preset, 'bayesncl', 2)}"
    unfinished.mkdir()
    (unfinished / "pretrain.json").write_text("{}")
    results = write_tables(preset, out, log=lambda *_: None)
    assert sorted((r["method"], r["seed"]) for r in results) == [
        ("bayesncl", 1),
        ("ncl", 1),
        ("ncl", 2),
    ]
    text = (out / "results.md").read_text()
    assert "| bayesncl | 1 |" in text and "| ncl | 2 |" in text
    assert "Not finished yet, so in no figure above (1 run): bayesncl seed 2." in text
    assert not any(out.glob("runs/*/log.txt"))  # nothing was trained
    (out / "runs" / f"ncl-seed2-{run_key(preset, 'ncl', 2)}" / "result.json").unlink()
    write_tables(preset, out, log=lambda *_: None)
    text = (out / "results.md").read_text()
    assert "in no figure above (2 runs): ncl seed 2, bayesncl seed 2." in text
    assert main(["--preset", str(preset.source), "--out", str(tmp_path / "empty"), "--table-only"])


@pytest.mark.solo
def test_keeping_records_copies_the_presets_finished_runs_then_writes_the_table(tmp_path):
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path, "methods: [ncl, bayesncl]\nseeds: [1, 2]\n")
    trained, kept = tmp_path / "trained", tmp_path / "kept"

    def run_dir(folder, method, seed):
        return folder / "runs" / f"{method}-seed{seed}-{run_key(preset, method, seed)}"

    for method, seed, gain in (("ncl", 1, 0.2), ("bayesncl", 1, 0.25), ("ncl", 2, 0.3)):
        folder = run_dir(trained, method, seed)
        folder.mkdir(parents=True)
        result = fake_result(method, seed, gain, commit=f"c{seed}", dirty=False)
        (folder / "result.json").write_text(json.dumps(result))
        (folder / "last.ckpt").write_bytes(b"weights")
    run_dir(trained, "bayesncl", 2).mkdir()  # under way: nothing of it is kept
    (trained / "runs" / "simclr-seed1-other").mkdir()  # not a run of this preset
    (trained / "runs" / "simclr-seed1-other" / "result.json").write_text("{}")
    argv = ["--preset", str(preset.source), "--out", str(kept), "--keep-records-from", str(trained)]
    assert main(argv) == 0
    assert sorted(
        p.parent.name.split("-")[0] + p.parent.name.split("-")[1]
        for p in kept.glob("runs/*/result.json")
    ) == ["bayesnclseed1", "nclseed1", "nclseed2"]
    assert not any(kept.glob("runs/*/*.ckpt")) and not run_dir(kept, "bayesncl", 2).exists()
    assert (kept / "COMMIT").read_text() == "c1 ncl seed 1\nc1 bayesncl seed 1\nc2 ncl seed 2\n"
    assert (
        "Not finished yet, so in no figure above (1 run): bayesncl seed 2."
        in (kept / "results.md").read_text()
    )
    assert main(argv) == 0  # again: nothing new, COMMIT unchanged
    assert (kept / "COMMIT").read_text().count("\n") == 3

    # a run trained from uncommitted changes is refused, and nothing else is written
    folder = run_dir(trained, "bayesncl", 2)
    (folder / "result.json").write_text(json.dumps(fake_result("bayesncl", 2, 0.3, dirty=True)))
    before = {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    assert main(argv) == 2
    assert {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()} == before
    assert main(["--preset", str(preset.source), "--keep-records-from", str(tmp_path / "no")]) == 2


def test_a_figure_that_rounds_to_zero_has_no_sign(tmp_path):
    """SimCLR's dense features give a consistency gain of -1.4e-17 (consistency minus its
    shuffled baseline, both 0.1): the table writes 0.000, not -0.000. A paired interval's end
    just below zero keeps its sign, which says on which side of zero it lies."""
    results = [fake_result("ncl", s, g) for s, g in ((1, 0.2), (2, 0.3), (3, 0.25))]
    results += [fake_result("simclr", s, -1.3877787807814457e-17) for s in (1, 2, 3)]
    results += [fake_result("bayesncl", s, g) for s, g in ((1, 0.2005), (2, 0.301), (3, 0.2515))]
    text = write_markdown(
        aggregate(results),
        tmp_path / "t.md",
        "unit",
        "abc",
        "d",
        paired=paired_differences(results),
    ).read_text()
    simclr = next(line for line in text.splitlines() if line.startswith("| simclr | 3 |"))
    assert "-0.000" not in simclr and "| 0.000 ± 0.000 |" in simclr
    # differences 0.0005, 0.001, 0.0015: mean 0.001, interval [-0.00024, +0.00224]
    assert "| bayesncl | 3 | +0.001 [-0.000, +0.002] |" in text

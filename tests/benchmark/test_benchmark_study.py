"""Seed aggregation, paired differences with t-intervals, preset variants, the spread-aware plots
and the background measures' pieces, from known values."""

from __future__ import annotations

import csv
import json
import math
import os
import stat
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, fake_result

from solo_bayesncl.benchmark.presets import load_preset
from solo_bayesncl.benchmark.runner import run_key
from solo_bayesncl.benchmark.table import (
    aggregate,
    paired_differences,
    t_quantile_975,
    write_markdown,
    write_paired_csv,
)


def test_t_quantiles():
    assert t_quantile_975(1) == pytest.approx(12.706)
    assert t_quantile_975(2) == pytest.approx(4.303)
    assert t_quantile_975(30) == pytest.approx(2.042)
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
    # differences 0.05, 0.02, 0.08: mean 0.05, sample std 0.03, t(2) = 4.303
    assert gain["n"] == 3 and gain["seeds"] == "1 2 3"
    assert gain["mean_diff"] == pytest.approx(0.05)
    assert gain["std_diff"] == pytest.approx(0.03)
    half = 4.303 * 0.03 / math.sqrt(3)
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


def test_study_presets_load():
    for name in ("study_seeds", "study_prior", "study_scenes"):
        preset = load_preset(name)
        assert len(preset.seeds) >= 3, name
        assert "ncl" in preset.methods and "bayesncl" in preset.methods, name
    scenes = load_preset("study_scenes")
    assert "data.dataset=fashion-mnist-scenes" in scenes.overrides
    rhos = _swept_values(load_preset("study_prior"), "method_kwargs.bayesian_prior_prob")
    assert {"0.1", "0.3", "0.5"} <= rhos


def _swept_values(preset, key: str) -> set[str]:
    """The values ``key`` takes over a preset's rows."""
    return {
        o.split("=")[1]
        for m in preset.methods
        for o in preset.run_overrides(m)
        if o.startswith(f"{key}=")
    }


_BAYESNCL_STUDY_KNOBS = {
    "method_kwargs.bayesian_prior_prob",
    "method_kwargs.bayesian_kl_lambda",
    "method_kwargs.gate_type",
    "optimizer.gating_head_lr",
}


def test_trained_budget_sweep_and_mechanism_share_their_base_presets_runs():
    """The sweep and the mechanism variants train only their new settings: every setting they
    share with study_budget / study_budget_200 has the same run key (so the linked runs folder
    holds it), and every other one is a BayesNCL variant changing one thing, or NCL with only a
    random dimension dropout (the mechanism's control). The mechanism runs where the comparison
    on shared backgrounds is read (200 epochs), not at 100 epochs."""
    from solo_bayesncl.benchmark.runner import run_key

    for name, base_name in (
        ("study_budget_sweep", "study_budget"),
        ("study_budget_sweep_200", "study_budget_fmnist_200"),
        ("study_budget_mechanism", "study_budget_200"),
    ):
        preset, base = load_preset(name), load_preset(base_name)
        assert preset.overrides == base.overrides, name
        shared = [m for m in preset.methods if m in base.methods]
        assert {"ncl", "bayesncl"} <= set(shared), name
        for method in shared:
            for seed in base.seeds:
                if seed in preset.seeds:
                    assert run_key(preset, method, seed) == run_key(base, method, seed), method
        for method in set(preset.methods) - set(base.methods):
            own = preset.run_overrides(method)[len(preset.overrides) :]
            if preset.base_method(method) == "ncl":
                assert own and all(o.startswith("++method_kwargs.dimension_dropout") for o in own)
                continue
            assert preset.base_method(method) == "bayesncl", method
            assert own and all(o.split("=")[0] in _BAYESNCL_STUDY_KNOBS for o in own), own
    lambdas = _swept_values(load_preset("study_budget_sweep"), "method_kwargs.bayesian_kl_lambda")
    assert {"1.0e-4", "3.0e-4", "1.0e-3"} <= lambdas
    sweep, sweep_200 = load_preset("study_budget_sweep"), load_preset("study_budget_sweep_200")
    assert sweep_200.methods == sweep.methods and sweep_200.variants == sweep.variants
    assert sweep_200.seeds == sweep.seeds == [1, 2, 3]
    mechanism = load_preset("study_budget_mechanism")
    assert "method_kwargs.gate_type=binary_concrete" in mechanism.run_overrides("bayesncl_concrete")
    assert "optimizer.gating_head_lr=1.0" in mechanism.run_overrides("bayesncl_headlr1")
    for control in ("ncl_dimdrop", "ncl_dimdrop_early"):
        assert control in mechanism.methods
        assert control not in load_preset("study_budget_200").methods
    assert mechanism.run_overrides("ncl_dimdrop")[-1:] == ["++method_kwargs.dimension_dropout=0.11"]
    assert mechanism.run_overrides("ncl_dimdrop_early")[-2:] == [
        "++method_kwargs.dimension_dropout=0.5",
        "++method_kwargs.dimension_dropout_epochs=20",
    ]


def test_the_budget_checks_are_the_scenes_study_at_its_length_and_at_twice_it():
    """study_budget_long (50 epochs against 100) ran exactly study_budget_scenes' settings, so
    its runs are the scenes study's seed 1; study_budget_200 doubles the length again, for the
    same three settings, and study_budget_400 doubles it once more for NCL and the official
    setting; nothing else differs."""
    from solo_bayesncl.benchmark.runner import run_key

    long, scenes = load_preset("study_budget_long"), load_preset("study_budget_scenes")
    check = load_preset("study_budget_200")
    assert long.overrides == scenes.overrides and long.linear == scenes.linear
    for method in ("ncl", "bayesncl"):
        assert run_key(long, method, 1) == run_key(scenes, method, 1), method
    doubled = {"max_epochs=200", "++scheduler.warmup_epochs=20", "interpretability.frequency=20"}
    assert set(check.overrides) - set(scenes.overrides) == doubled
    assert len(check.overrides) == len(scenes.overrides)
    assert long.methods == ["ncl", "bayesncl"] and check.linear == scenes.linear
    assert scenes.methods == ["ncl", "bayesncl", "bayesncl_rho0.3_kl3e-4"]
    assert check.methods[:3] == scenes.methods  # then the sweep's best setting
    assert {k: check.variants[k] for k in scenes.variants} == scenes.variants
    longest = load_preset("study_budget_400")
    quadrupled = {"max_epochs=400", "++scheduler.warmup_epochs=40", "interpretability.frequency=40"}
    assert set(longest.overrides) - set(scenes.overrides) == quadrupled
    assert len(longest.overrides) == len(scenes.overrides) and longest.linear == scenes.linear
    assert longest.methods == ["ncl", "bayesncl"] and longest.seeds == [1]


def test_the_fashion_mnist_comparison_is_part_1_at_twice_its_length():
    """study_budget_fmnist_200 is study_budget (plain Fashion-MNIST, 100 epochs) at 200 epochs,
    the warm-up and the callback's interval doubled with it, so that budget --shorter compares
    the two on the same seeds; nothing else differs. Since 100 epochs did not hold, it is the
    comparison on Fashion-MNIST: part 1's three settings and five seeds, and the runs it had
    finished before it grew keep their folders (their run keys are unchanged)."""
    from solo_bayesncl.benchmark.runner import run_folder_name

    part1, check = load_preset("study_budget"), load_preset("study_budget_fmnist_200")
    doubled = {"max_epochs=200", "++scheduler.warmup_epochs=20", "interpretability.frequency=20"}
    assert set(check.overrides) - set(part1.overrides) == doubled
    assert len(check.overrides) == len(part1.overrides)
    assert "data.dataset=fashion-mnist" in check.overrides
    assert check.linear == part1.linear and check.knn == part1.knn
    assert part1.methods == ["ncl", "bayesncl", "bayesncl_rho0.3_kl3e-4"]
    assert check.methods[:3] == part1.methods  # then the sweep's best setting
    assert {k: check.variants[k] for k in part1.variants} == part1.variants
    assert check.seeds == [1, 2, 3, 4, 5]
    assert run_folder_name(check, "ncl", 1) == "ncl-seed1-bc037f95c49f"
    assert run_folder_name(check, "bayesncl", 1) == "bayesncl-seed1-6b8554ae07aa"


def _sweep_200_pick(tmp_path) -> str:
    """The setting the sweep at 200 epochs picked, recomputed by its rule from the kept runs
    (the sweep's runs are kept in study_budget_fmnist_200's folder, which its own links to)."""
    import shutil

    from solo_bayesncl.benchmark.best_setting import best_setting, setting_verdicts
    from solo_bayesncl.benchmark.table import finished_results, folder_rows

    kept = REPO / "results" / "study_budget_sweep_200"
    folder = tmp_path / "study_budget_sweep_200"
    folder.mkdir()
    for name in ("results.csv", "preset.yaml"):
        shutil.copy(kept / name, folder / name)
    (folder / "runs").symlink_to(REPO / "results" / "study_budget_fmnist_200" / "runs")
    results = finished_results(folder, folder_rows(folder, None))
    planned = load_preset(str(folder / "preset.yaml")).methods
    best = best_setting(setting_verdicts(results, planned=planned))
    assert best is not None, "the sweep at 200 epochs has not decided (best_setting.md)"
    return best.setting


def _cpu_preset_setting(tmp_path) -> str:
    """The BayesNCL setting the trained-budget evidence gives the cpu preset: the sweep's pick
    until its five seeds on shared backgrounds have finished; then the pick if its class gain
    there leads NCL's beyond seed noise (the paired 95% interval's lower end above zero), and
    otherwise the paper's setting (docs/results.md states this rule)."""
    pick = _sweep_200_pick(tmp_path)
    paired = REPO / "results" / "study_budget_200" / "paired_differences.csv"
    with open(paired, newline="") as handle:
        gain = next(
            (
                row
                for row in csv.DictReader(handle)
                if row["method"] == pick and row["column"] == "consistency_gain"
            ),
            None,
        )
    if gain is None or int(gain["n"]) < 5:
        return pick
    return pick if float(gain["ci_low"]) > 0 else "bayesncl"


def test_the_cpu_preset_runs_bayesncl_at_the_setting_the_evidence_supports(tmp_path):
    """The cpu preset's BayesNCL row follows the evidence at the trained budget: it runs the
    prior and KL weight of the setting ``_cpu_preset_setting`` names, and nothing else of
    BayesNCL's is changed."""
    setting = _cpu_preset_setting(tmp_path)
    sweep, cpu = load_preset("study_budget_sweep_200"), load_preset("cpu")
    expected = sweep.run_overrides(setting)[len(sweep.overrides) :]
    assert cpu.methods[-1] == "bayesncl"
    assert cpu.method_overrides.get("bayesncl", []) == expected
    assert "bayesncl" not in cpu.variants


def test_the_comparisons_at_200_epochs_hold_the_setting_the_sweep_picked(tmp_path):
    """The sweep's best setting gets its seeds 4-5 on Fashion-MNIST and five seeds on shared
    backgrounds: both comparisons list it with the sweep's own overrides, so its seeds 1-3 on
    Fashion-MNIST are the sweep's runs (the same run keys)."""
    pick = _sweep_200_pick(tmp_path)
    sweep = load_preset("study_budget_sweep_200")
    own = sweep.run_overrides(pick)[len(sweep.overrides) :]
    for name in ("study_budget_fmnist_200", "study_budget_200"):
        preset = load_preset(name)
        assert pick in preset.methods and preset.seeds == [1, 2, 3, 4, 5], name
        assert preset.run_overrides(pick)[len(preset.overrides) :] == own, name
    fmnist = load_preset("study_budget_fmnist_200")
    for seed in sweep.seeds:
        assert run_key(fmnist, pick, seed) == run_key(sweep, pick, seed)


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


def test_the_budget_study_script_links_shared_runs_and_skips_unlisted_seeds(tmp_path):
    """results/run_budget_study.sh: the sweep's and the mechanism's runs folders are links to
    their base presets' (so a shared run trains once), and a seed a preset does not list
    (the sweep's 4) is not run; the benchmark is called once per preset and seed, in order."""
    calls = tmp_path / "calls.txt"
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    # the benchmark itself is recorded, not run; the seed check runs in the real interpreter
    shim.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-m" ]; then echo "$*" >> ' + str(calls) + "; exit 0; fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    env["PYTHONPATH"] = str(REPO)
    out = tmp_path / "results"

    def study(*args: str) -> None:
        subprocess.run(
            ["sh", "results/run_budget_study.sh", str(out), *args],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )

    study("3 4", "study_budget_sweep study_budget")
    link = out / "study_budget_sweep" / "runs"
    assert link.is_symlink() and link.resolve() == (out / "study_budget" / "runs").resolve()
    ran = [
        line.split("--preset ")[1].split()[0] + " " + line.split("--seeds ")[1].strip()
        for line in calls.read_text().splitlines()
    ]
    assert ran == ["study_budget_sweep 3", "study_budget 3", "study_budget 4"]
    # a second call keeps the link (and whatever the runs folder holds)
    (out / "study_budget" / "runs" / "kept").mkdir()
    study("1", "study_budget_sweep")
    assert (link / "kept").is_dir()
    # the 100-epoch check's runs are the scenes study's
    study("1", "study_budget_long")
    long_link = out / "study_budget_long" / "runs"
    assert long_link.resolve() == (out / "study_budget_scenes" / "runs").resolve()
    # the mechanism variants run at 200 epochs, beside the 200-epoch comparison's runs
    study("1", "study_budget_mechanism")
    mechanism_link = out / "study_budget_mechanism" / "runs"
    assert mechanism_link.resolve() == (out / "study_budget_200" / "runs").resolve()
    # the 200-epoch sweep, beside the 200-epoch Fashion-MNIST comparison's runs
    study("1", "study_budget_sweep_200")
    sweep_link = out / "study_budget_sweep_200" / "runs"
    assert sweep_link.resolve() == (out / "study_budget_fmnist_200" / "runs").resolve()
    # SHARE=1: copies of the command share the runs, each leaving the busy ones to the others
    assert "--leave-busy" not in calls.read_text()
    env["SHARE"] = "1"
    study("2", "study_budget_fmnist_200")
    assert calls.read_text().splitlines()[-1].endswith("--seeds 2 --leave-busy")


def test_the_budget_study_script_restores_the_kept_runs_so_shared_runs_are_not_retrained(
    tmp_path,
):
    """KEPT=<the repository's results> copies the kept records of finished runs into the study
    folder before any run starts, so that the runner (which counts a run with a result.json as
    finished) skips them; a file the study folder holds is never replaced, and a run under way
    there is left to resume."""
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir()
    shim.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-m" ]; then exit 0; fi\n'  # the benchmark itself is not run
        f'exec {sys.executable} "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    kept, out = tmp_path / "kept", tmp_path / "study"
    for name in ("ncl-seed1-aaa", "bayesncl-seed1-bbb", "ncl-seed2-ccc"):
        folder = kept / "study_budget" / "runs" / name
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({"run": name}))
        (folder / "pretrain_metrics.csv").write_text(f"epoch\n{name}\n")
    (kept / "study_budget" / "runs" / "unfinished-seed1-ddd").mkdir()  # kept nothing: skipped
    here = out / "study_budget" / "runs"
    (here / "bayesncl-seed1-bbb").mkdir(parents=True)  # already finished here, own records
    (here / "bayesncl-seed1-bbb" / "result.json").write_text("mine")
    (here / "ncl-seed2-ccc").mkdir()  # under way here
    (here / "ncl-seed2-ccc" / "last.ckpt").write_bytes(b"weights")
    env = dict(os.environ, PATH=f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    env.update(PYTHONPATH=str(REPO), KEPT=str(kept))
    done = subprocess.run(
        ["sh", "results/run_budget_study.sh", str(out), "1", "study_budget_sweep"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    restored = here / "ncl-seed1-aaa"
    assert json.loads((restored / "result.json").read_text()) == {"run": "ncl-seed1-aaa"}
    assert (restored / "pretrain_metrics.csv").read_text() == "epoch\nncl-seed1-aaa\n"
    assert (here / "bayesncl-seed1-bbb" / "result.json").read_text() == "mine"
    assert (here / "bayesncl-seed1-bbb" / "pretrain_metrics.csv").is_file()  # the missing record
    assert sorted(p.name for p in (here / "ncl-seed2-ccc").iterdir()) == ["last.ckpt"]
    assert "ncl-seed2-ccc: unfinished here, finished in" in done.stdout
    assert not (here / "unfinished-seed1-ddd").exists()
    # the sweep reads them through its link to study_budget's runs folder
    assert (out / "study_budget_sweep" / "runs" / "ncl-seed1-aaa" / "result.json").is_file()
    # without KEPT nothing is copied
    env.pop("KEPT")
    subprocess.run(
        ["sh", "results/run_budget_study.sh", str(tmp_path / "bare"), "1", "study_budget_sweep"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert not any((tmp_path / "bare" / "study_budget" / "runs").iterdir())


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

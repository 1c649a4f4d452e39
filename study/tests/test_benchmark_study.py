"""The study's presets, what its records decide and its run script: the presets share their
runs as the records' folders say, the cpu preset follows the evidence, and
study/run_budget_study.sh links shared runs, skips unlisted seeds and restores kept runs."""

from __future__ import annotations

import csv
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from helpers import REPO

from solo_bayesncl.benchmark.presets import Preset, load_preset
from solo_bayesncl.benchmark.runner import run_folder_name, run_key
from study import RECORDS, preset_file


def study_preset(name: str) -> Preset:
    """A study preset, read from its file."""
    return load_preset(preset_file(name))


def test_study_budget_presets_share_everything_but_the_dataset():
    plain, scenes = study_preset("study_budget"), study_preset("study_budget_scenes")
    assert plain.methods == scenes.methods == ["ncl", "bayesncl", "bayesncl_rho0.3_kl3e-4"]
    assert len(plain.seeds) >= 5 and plain.seeds == scenes.seeds
    differ = set(plain.overrides) ^ set(scenes.overrides)
    assert all(o.split("=")[0].lstrip("+").startswith("data.") for o in differ), differ
    assert (
        "max_epochs=100" in plain.overrides and "++interpretability.probe=True" in plain.overrides
    )
    assert "++scheduler.warmup_epochs=10" in plain.overrides  # 10% of the budget


def test_every_study_preset_trains_the_pipeline_its_kept_runs_trained_with():
    """The shipped configs train solo-learn's per-image views (data.augment_on: per_image); every
    kept run of the study trained the batched ones, the choice for Fashion-MNIST then. Each study
    preset names that pipeline, so that a new seed joins its table on the same pipeline, and
    every kept run folder is one its preset names (a run key covers the overrides), so that
    --table-only still finds them."""
    presets = [load_preset(f) for f in sorted((REPO / "study" / "presets").glob("*.yaml"))]
    assert len(presets) >= 12
    named = set()
    for preset in presets:
        assert "data.augment_on=batch" in preset.overrides, preset.name
        runs = Path(preset.out_dir) / "runs"
        named |= {
            runs.resolve() / run_folder_name(preset, m, s)
            for m in preset.methods
            for s in preset.seeds
        }
    kept = [
        f.parent.resolve()
        for f in RECORDS.glob("study_*/runs/*/result.json")
        if not f.parent.parent.is_symlink()
    ]
    assert len(kept) >= 70
    assert set(kept) <= named, sorted(set(kept) - named)[:3]
    for folder in kept:
        key = json.loads((folder / "result.json").read_text())["run_key"]
        assert folder.name.endswith(f"-{key}"), folder


def test_study_presets_load():
    for name in ("study_seeds", "study_prior", "study_scenes"):
        preset = study_preset(name)
        assert len(preset.seeds) >= 3, name
        assert "ncl" in preset.methods and "bayesncl" in preset.methods, name
    scenes = study_preset("study_scenes")
    assert "data.dataset=fashion-mnist-scenes" in scenes.overrides
    rhos = _swept_values(study_preset("study_prior"), "method_kwargs.bayesian_prior_prob")
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
    for name, base_name in (
        ("study_budget_sweep", "study_budget"),
        ("study_budget_sweep_200", "study_budget_fmnist_200"),
        ("study_budget_mechanism", "study_budget_200"),
    ):
        preset, base = study_preset(name), study_preset(base_name)
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
    lambdas = _swept_values(study_preset("study_budget_sweep"), "method_kwargs.bayesian_kl_lambda")
    assert {"1.0e-4", "3.0e-4", "1.0e-3"} <= lambdas
    sweep, sweep_200 = study_preset("study_budget_sweep"), study_preset("study_budget_sweep_200")
    assert sweep_200.methods == sweep.methods and sweep_200.variants == sweep.variants
    assert sweep_200.seeds == sweep.seeds == [1, 2, 3]
    mechanism = study_preset("study_budget_mechanism")
    assert "method_kwargs.gate_type=binary_concrete" in mechanism.run_overrides("bayesncl_concrete")
    assert "optimizer.gating_head_lr=1.0" in mechanism.run_overrides("bayesncl_headlr1")
    for control in ("ncl_dimdrop", "ncl_dimdrop_early"):
        assert control in mechanism.methods
        assert control not in study_preset("study_budget_200").methods
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
    long, scenes = study_preset("study_budget_long"), study_preset("study_budget_scenes")
    check = study_preset("study_budget_200")
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
    longest = study_preset("study_budget_400")
    quadrupled = {"max_epochs=400", "++scheduler.warmup_epochs=40", "interpretability.frequency=40"}
    assert set(longest.overrides) - set(scenes.overrides) == quadrupled
    assert len(longest.overrides) == len(scenes.overrides) and longest.linear == scenes.linear
    assert longest.methods == ["ncl", "bayesncl"] and longest.seeds == [1]


def test_the_fashion_mnist_comparison_is_part_1_at_twice_its_length():
    """study_budget_fmnist_200 is study_budget (plain Fashion-MNIST, 100 epochs) at 200 epochs,
    the warm-up and the callback's interval doubled with it, so that budget --shorter compares
    the two on the same seeds; nothing else differs. Since 100 epochs did not hold, it is the
    comparison on Fashion-MNIST: part 1's three settings and five seeds, and the runs it had
    finished before it grew keep their folders (their run keys are part 1's)."""
    part1, check = study_preset("study_budget"), study_preset("study_budget_fmnist_200")
    doubled = {"max_epochs=200", "++scheduler.warmup_epochs=20", "interpretability.frequency=20"}
    assert set(check.overrides) - set(part1.overrides) == doubled
    assert len(check.overrides) == len(part1.overrides)
    assert "data.dataset=fashion-mnist" in check.overrides
    assert check.linear == part1.linear and check.knn == part1.knn
    assert part1.methods == ["ncl", "bayesncl", "bayesncl_rho0.3_kl3e-4"]
    assert check.methods[:3] == part1.methods  # then the sweep's best setting
    assert {k: check.variants[k] for k in part1.variants} == part1.variants
    assert check.seeds == [1, 2, 3, 4, 5]
    assert run_folder_name(check, "ncl", 1) == "ncl-seed1-f2cc398b0757"
    assert run_folder_name(check, "bayesncl", 1) == "bayesncl-seed1-1d5718446851"


def _sweep_200_pick(tmp_path) -> str:
    """The setting the sweep at 200 epochs picked, recomputed by its rule from the kept runs
    (the sweep's runs are kept in study_budget_fmnist_200's folder, which its own links to)."""
    from study.best_setting import best_setting, setting_verdicts
    from study.folders import finished_results, folder_rows

    kept = RECORDS / "study_budget_sweep_200"
    folder = tmp_path / "study_budget_sweep_200"
    folder.mkdir()
    for name in ("results.csv", "preset.yaml"):
        shutil.copy(kept / name, folder / name)
    (folder / "runs").symlink_to(RECORDS / "study_budget_fmnist_200" / "runs")
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
    paired = RECORDS / "study_budget_200" / "paired_differences.csv"
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
    sweep, cpu = study_preset("study_budget_sweep_200"), load_preset("cpu")
    expected = sweep.run_overrides(setting)[len(sweep.overrides) :]
    assert cpu.methods[-1] == "bayesncl"
    assert cpu.method_overrides.get("bayesncl", []) == expected
    assert "bayesncl" not in cpu.variants


def test_the_comparisons_at_200_epochs_hold_the_setting_the_sweep_picked(tmp_path):
    """The sweep's best setting gets its seeds 4-5 on Fashion-MNIST and five seeds on shared
    backgrounds: both comparisons list it with the sweep's own overrides, so its seeds 1-3 on
    Fashion-MNIST are the sweep's runs (the same run keys)."""
    pick = _sweep_200_pick(tmp_path)
    sweep = study_preset("study_budget_sweep_200")
    own = sweep.run_overrides(pick)[len(sweep.overrides) :]
    for name in ("study_budget_fmnist_200", "study_budget_200"):
        preset = study_preset(name)
        assert pick in preset.methods and preset.seeds == [1, 2, 3, 4, 5], name
        assert preset.run_overrides(pick)[len(preset.overrides) :] == own, name
    fmnist = study_preset("study_budget_fmnist_200")
    for seed in sweep.seeds:
        assert run_key(fmnist, pick, seed) == run_key(sweep, pick, seed)


def test_the_budget_study_script_links_shared_runs_and_skips_unlisted_seeds(tmp_path):
    """study/run_budget_study.sh: the sweep's and the mechanism's runs folders are links to
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
            ["sh", "study/run_budget_study.sh", str(out), *args],
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
        Path(line.split("--preset ")[1].split()[0]).stem + " " + line.split("--seeds ")[1].strip()
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
    """KEPT=<the repository's study/records> copies the kept records of finished runs into the study
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
        ["sh", "study/run_budget_study.sh", str(out), "1", "study_budget_sweep"],
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
        ["sh", "study/run_budget_study.sh", str(tmp_path / "bare"), "1", "study_budget_sweep"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert not any((tmp_path / "bare" / "study_budget" / "runs").iterdir())

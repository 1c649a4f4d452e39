"""Where the budget curves stop moving (study.budget)."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from study.budget import (
    budget_curves,
    change_window,
    difference_curves,
    figure_budgets,
    main,
    study_budget,
    write_budget,
)

GAIN = "interp/semantic_consistency_gain"
PROBE = "interp/probe_top1"


def _run(folder, setting, seed, curves, method="bayesncl"):
    """A finished run whose metrics.csv logs ``curves[column][epoch]`` (1-based epochs), with
    rows of per-step logging between them, as Lightning's CSV logger writes them."""
    folder.mkdir(parents=True)
    columns = sorted(curves)
    epochs = sorted({e for points in curves.values() for e in points})
    lines = ["epoch,step,train_loss_step," + ",".join(columns)]
    for epoch in epochs:
        lines.append(f"{epoch - 1},{epoch * 19 - 5},1.5," + "," * (len(columns) - 1))
        values = [str(curves[c].get(epoch, "")) for c in columns]
        lines.append(f"{epoch - 1},{epoch * 19},," + ",".join(values))
    (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
    result = {
        "method": method,
        "variant": setting,
        "seed": seed,
        "commit": "abcdef1234567890",
        "pretrain_metrics_csv": str(folder / "metrics.csv"),
    }
    (folder / "result.json").write_text(json.dumps(result))
    return result


def _rising_then_flat(offset):
    # the gain rises 0.05 per 5 epochs to epoch 30, then 0.001 per 5 epochs; seeds offset by
    # +-0.01 (sample std 0.01 over three seeds 0, +0.01, -0.01)
    return {e: (0.05 * min(e, 30) / 5 + 0.0002 * max(e - 30, 0) + offset) for e in range(5, 55, 5)}


def test_a_curve_flattens_where_ten_epochs_move_it_less_than_the_seeds_do(tmp_path):
    offsets = (0.0, 0.01, -0.01)
    runs = [
        _run(tmp_path / f"s{i}", "bayesncl", i, {GAIN: _rising_then_flat(o)})
        for i, o in enumerate(offsets, 1)
    ]
    (budget,) = figure_budgets(budget_curves(runs), window=10)
    std = statistics.stdev(offsets)  # 0.01
    # epoch 35 changes by 0.05 (rise to 30) + 0.001 over epochs 25-35: more than 0.01;
    # epoch 40 by 0.002 (both ends past 30): less; so flat from 40
    assert budget.flat_from == 40
    assert budget.seeds == 3 and budget.last_epoch == 50
    assert budget.mean == pytest.approx(0.3 + 0.0002 * 20)
    assert budget.std == pytest.approx(std)
    assert budget.last_change == pytest.approx(0.002)
    assert study_budget([budget]) == 40


def test_a_curve_still_moving_at_the_last_epoch_gives_no_budget(tmp_path):
    runs = []
    for seed, offset in ((1, 0.0), (2, 0.5)):  # sample std 0.354
        probe = {e: 60 + e / 2 + offset for e in range(5, 55, 5)}  # +5 points per 10 epochs
        gain = _rising_then_flat(offset / 50)
        runs.append(_run(tmp_path / f"n{seed}", "ncl", seed, {PROBE: probe, GAIN: gain}, "ncl"))
    budgets = {b.column: b for b in figure_budgets(budget_curves(runs))}
    assert budgets[PROBE].flat_from is None
    assert budgets[PROBE].last_change == pytest.approx(5.0)
    assert budgets[GAIN].flat_from == 40
    assert study_budget(list(budgets.values())) is None
    path = write_budget(runs, tmp_path / "budget.md")
    text = path.read_text()
    assert "**No budget yet** (still moving at the last epoch: converged probe top-1" in text
    assert "| ncl | class consistency gain | 2 | 50 |" in text and "| epoch 40 |" in text


def test_one_seed_is_never_judged_flat(tmp_path):
    flat = {e: 0.2 for e in range(5, 55, 5)}
    runs = [_run(tmp_path / "a", "bayesncl", 1, {GAIN: flat})]
    (budget,) = figure_budgets(budget_curves(runs))
    assert budget.flat_from is None and math.isnan(budget.std)
    assert "fewer than two seeds: bayesncl" in write_budget(runs, tmp_path / "b.md").read_text()


def test_a_curve_that_does_not_move_is_flat_even_when_the_seeds_agree(tmp_path):
    # active dims: identical on both seeds and constant: std 0, change 0
    runs = [
        _run(
            tmp_path / f"s{s}",
            "ncl",
            s,
            {"interp/active_dims": dict.fromkeys(range(5, 55, 5), 250.0)},
        )
        for s in (1, 2)
    ]
    (budget,) = figure_budgets(budget_curves(runs))
    assert budget.flat_from == 15  # the first epoch with one 10 epochs before it


def test_only_epochs_every_seed_logged_are_read(tmp_path):
    # seed 2 stopped logging after epoch 30: the setting is judged up to 30
    one = _run(tmp_path / "s1", "ncl", 1, {GAIN: _rising_then_flat(0.0)})
    two = _run(
        tmp_path / "s2",
        "ncl",
        2,
        {GAIN: {e: v for e, v in _rising_then_flat(0.02).items() if e <= 30}},
    )
    (budget,) = figure_budgets(budget_curves([one, two]))
    assert budget.last_epoch == 30 and budget.flat_from is None


def test_a_bad_window_is_refused():
    with pytest.raises(ValueError, match="window=0 must be a positive number of epochs"):
        figure_budgets({}, window=0)


def _every_twenty_epochs(folder, settings=("ncl",)):
    # a 200-epoch study evaluated every 20 epochs: the gain rises to epoch 100, then moves by
    # 0.001 per 20 epochs; seeds 0.02 apart (sample std 0.0141)
    runs = []
    for setting in settings:
        for seed, offset in ((1, 0.0), (2, 0.02)):
            gain = {
                e: 0.2 * min(e, 100) / 100 + 0.00005 * max(e - 100, 0) + offset
                for e in range(20, 220, 20)
            }
            runs.append(
                _run(folder / f"{setting}-seed{seed}", setting, seed, {GAIN: gain}, setting)
            )
    return runs


def test_the_default_window_is_ten_epochs_rounded_up_to_whole_evaluation_intervals(tmp_path):
    # with evaluations every 20 epochs a 10-epoch change has no earlier point to be measured
    # from: the default is 20, and the curve that has flattened is judged so (not "still moving")
    runs = _every_twenty_epochs(tmp_path)
    curves = budget_curves(runs)
    assert change_window(curves) == 20
    (budget,) = figure_budgets(curves)
    assert budget.last_change == pytest.approx(0.001)
    assert budget.flat_from == 120  # epoch 100 still rose 0.04 from epoch 80
    text = write_budget(runs, tmp_path / "budget.md").read_text()
    assert "**Budget: epoch 120.** From there on every figure moves less over 20 epochs" in text
    # five-epoch evaluations keep the ten-epoch window; none at all leave it at ten
    five = {GAIN: {"ncl": {1: {e: 0.0 for e in range(5, 55, 5)}}}}
    assert change_window(five) == 10 and change_window({}) == 10
    assert change_window({GAIN: {"ncl": {1: {e: 0.0 for e in range(3, 30, 3)}}}}) == 12


def test_a_window_between_two_evaluations_is_refused(tmp_path):
    curves = budget_curves(_every_twenty_epochs(tmp_path / "runs"))
    with pytest.raises(ValueError, match="window=10 is not a multiple of the 20 epochs between"):
        figure_budgets(curves, window=10)
    assert change_window(curves, 40) == 40
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--window", "30"])
    assert not (tmp_path / "budget.md").exists()


def test_the_command_reads_the_rows_of_the_folders_table_by_default(tmp_path, capsys):
    # a folder whose runs another preset shares (here a row still moving, with one seed) reads
    # the rows its own table (results.csv) lists; --methods still chooses
    _every_twenty_epochs(tmp_path / "runs")
    moving = {e: e / 100 for e in range(20, 220, 20)}
    _run(tmp_path / "runs" / "other-seed1", "bayesncl_other", 1, {GAIN: moving})
    (tmp_path / "results.csv").write_text("method,base_method,seeds\nncl,ncl,2\n")
    assert main([str(tmp_path)]) == 0
    assert "figures: **Budget: epoch 120.**" in capsys.readouterr().out
    assert "bayesncl_other" not in (tmp_path / "budget.md").read_text()
    assert main([str(tmp_path), "--methods", "ncl,bayesncl_other"]) == 0
    assert "fewer than two seeds: bayesncl_other" in capsys.readouterr().out


def test_the_folders_table_also_chooses_the_seeds(tmp_path, capsys):
    # a preset of one seed sharing the runs of a preset of two: its table lists seed 1 only
    _every_twenty_epochs(tmp_path / "runs")
    (tmp_path / "results.csv").write_text("method,base_method,seeds,seed_list\nncl,ncl,1,1\n")
    assert main([str(tmp_path)]) == 0
    assert "fewer than two seeds: ncl" in capsys.readouterr().out
    assert "Budget curves of 1 finished runs" in (tmp_path / "budget.md").read_text()


def test_the_command_judges_a_results_folder_and_filters_rows(tmp_path, capsys):
    runs = tmp_path / "results" / "runs"
    for seed, offset in ((1, 0.0), (2, 0.01), (3, -0.01)):
        _run(runs / f"ncl-seed{seed}", "ncl", seed, {GAIN: _rising_then_flat(offset)}, "ncl")
        # a row of another preset sharing the folder, still moving: filtered out
        moving = {e: e / 10 + offset for e in range(5, 55, 5)}
        _run(runs / f"v-seed{seed}", "bayesncl_other", seed, {GAIN: moving})
    assert main([str(tmp_path / "results"), "--methods", "ncl"]) == 0
    assert "**Budget: epoch 40.**" in capsys.readouterr().out
    text = (tmp_path / "results" / "budget.md").read_text()
    assert "bayesncl_other" not in text and "commits abcdef123456" in text
    assert main([str(tmp_path / "results"), "--out", str(tmp_path / "all.md")]) == 0
    assert (
        "still moving at the last epoch: class consistency gain of bayesncl_other"
        in (tmp_path / "all.md").read_text()
    )


def test_the_command_names_what_is_missing(tmp_path):
    with pytest.raises(SystemExit, match="runs does not exist: pass a benchmark results folder"):
        main([str(tmp_path)])
    _run(tmp_path / "runs" / "x", "ncl", 1, {"val_acc1": {5: 50.0}}, "ncl")
    with pytest.raises(SystemExit, match="no finished run of bayesncl in"):
        main([str(tmp_path), "--methods", "bayesncl"])
    with pytest.raises(SystemExit, match="logged a budget figure"):
        main([str(tmp_path)])
    assert not (tmp_path / "budget.md").exists()


def test_the_comparison_is_judged_on_paired_differences(tmp_path):
    # both settings rise together by 0.05 per 10 epochs (their figures keep moving), the
    # difference between them is constant per seed (+0.02, +0.03): the comparison has flattened
    runs = []
    for seed, (offset, gap) in enumerate(((0.0, 0.02), (0.01, 0.03)), 1):
        rising = {e: e / 200 + offset for e in range(5, 55, 5)}
        runs.append(_run(tmp_path / f"n{seed}", "ncl", seed, {GAIN: rising}, "ncl"))
        gated = {e: v + gap for e, v in rising.items()}
        runs.append(_run(tmp_path / f"b{seed}", "bayesncl", seed, {GAIN: gated}))
    # a seed only the gated setting has is not paired
    runs.append(_run(tmp_path / "b3", "bayesncl", 3, {GAIN: dict.fromkeys(range(5, 55, 5), 9.0)}))
    (difference,) = figure_budgets(difference_curves(budget_curves(runs)))
    assert difference.setting == "bayesncl - ncl" and difference.seeds == 2
    assert difference.mean == pytest.approx(0.025) and difference.flat_from == 15
    text = write_budget(runs, tmp_path / "budget.md").read_text()
    comparison, figures = text.split("## The figures themselves")
    assert "**Budget: epoch 15.** From there on every difference against ncl" in comparison
    assert "| bayesncl - ncl | class consistency gain | 2 | 50 | 0.0250 ± 0.0071 |" in comparison
    assert "**No budget yet** (still moving at the last epoch: class consistency gain" in figures


def test_no_reference_row_means_no_comparison_section(tmp_path):
    runs = [
        _run(tmp_path / f"s{s}", "bayesncl", s, {GAIN: _rising_then_flat(o)})
        for s, o in ((1, 0.0), (2, 0.01))
    ]
    assert difference_curves(budget_curves(runs)) == {}
    assert "## The comparison" not in write_budget(runs, tmp_path / "b.md").read_text()


def _schedule(folder, epochs, diffs, base=0.3):
    """NCL and BayesNCL runs whose class gains differ by ``diffs[seed]`` at every epoch up to
    ``epochs``; NCL's gain itself rises with the epoch."""
    runs = []
    for seed, diff in diffs.items():
        ncl = {e: base + 0.001 * e for e in range(5, epochs + 5, 5)}
        runs.append(_run(folder / f"ncl-{seed}", "ncl", seed, {GAIN: ncl}, method="ncl"))
        gated = {e: v + diff for e, v in ncl.items()}
        runs.append(_run(folder / f"b-{seed}", "bayesncl", seed, {GAIN: gated}))
    return runs


def test_a_difference_holds_when_the_longer_schedule_moves_it_less_than_seed_noise(tmp_path):
    from study.budget import schedule_checks

    short = budget_curves(_schedule(tmp_path / "short", 50, {1: 0.0, 2: 0.02, 3: -0.02}))
    near = budget_curves(_schedule(tmp_path / "near", 100, {1: 0.01}))
    far = budget_curves(_schedule(tmp_path / "far", 100, {1: 0.05}))
    (check,) = schedule_checks(short, near)
    assert (check.setting, check.seeds, check.short_epoch, check.long_epoch) == (
        "bayesncl - ncl",
        (1,),
        50,
        100,
    )
    assert check.short_mean == pytest.approx(0.0, abs=1e-12)  # seed 1 only
    assert check.long_mean == pytest.approx(0.01)
    assert check.short_std == pytest.approx(0.02)  # over the shorter schedule's three seeds
    assert check.holds is True
    (moved,) = schedule_checks(short, far)
    assert moved.change == pytest.approx(0.05) and moved.holds is False
    one_seed = budget_curves(_schedule(tmp_path / "one", 50, {1: 0.0}))
    (unjudged,) = schedule_checks(one_seed, far)
    assert unjudged.holds is None and math.isnan(unjudged.short_std)


def test_the_command_checks_a_shorter_schedule_against_the_longer_runs(tmp_path, capsys):
    _schedule(tmp_path / "short" / "runs", 50, {1: 0.0, 2: 0.02, 3: -0.02})
    _schedule(tmp_path / "long" / "runs", 100, {1: 0.05})
    assert main([str(tmp_path / "long"), "--shorter", str(tmp_path / "short")]) == 0
    printed = capsys.readouterr().out
    assert (
        "shorter schedule: **The shorter budget does not hold**: the longer schedule moved "
        "class consistency gain of bayesncl - ncl." in printed
    )
    text = (tmp_path / "long" / "budget.md").read_text()
    assert "## Against the shorter schedule (short)" in text
    assert (
        "| bayesncl - ncl | class consistency gain | 1 | 50: 0.0000 | 100: 0.0500 | +0.0500 "
        "| 0.0200 | **no** |" in text
    )
    # no seed in common: a one-line error, nothing written
    _schedule(tmp_path / "other" / "runs", 100, {7: 0.0})
    with pytest.raises(SystemExit, match="--shorter .*short: no difference against ncl on a seed"):
        main([str(tmp_path / "other"), "--shorter", str(tmp_path / "short")])
    assert not (tmp_path / "other" / "budget.md").exists()


def test_a_half_written_result_is_named_in_one_line(tmp_path):
    """A ``result.json`` cut short (a full disk, a copy stopped half-way) is named, in one line,
    with what to do; it is never a JSONDecodeError traceback, nor silently left out."""
    _every_twenty_epochs(tmp_path / "runs")
    broken = tmp_path / "runs" / "ncl-seed9" / "result.json"
    broken.parent.mkdir()
    broken.write_text('{"method": "ncl", "seed": 9, "pretrain_metr')
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path)])
    message = str(stop.value.code)
    assert "\n" not in message
    assert message.startswith(f"error: {broken}: not a finished run's result (not valid JSON")
    assert not (tmp_path / "budget.md").exists()


@pytest.mark.parametrize(
    ("metrics", "reason"),
    [
        (b"\x80\xff" * 64, "not UTF-8 text"),
        (b"epoch,interp/probe_top1\n0,51.0\n1,high\n", "line 3, column 'interp/probe_top1'"),
    ],
)
def test_a_metrics_csv_that_is_no_log_of_numbers_is_named_in_one_line(tmp_path, metrics, reason):
    """The study's commands read a run's per-epoch metrics through the benchmark's loader: a
    file of random bytes, or a word among the figures, is named with the line and column, never
    a UnicodeDecodeError or ValueError traceback."""
    _every_twenty_epochs(tmp_path / "runs")
    broken = tmp_path / "runs" / "ncl-seed9" / "metrics.csv"
    _run(broken.parent, "ncl", 9, {GAIN: {20: 0.1}}, method="ncl")
    broken.write_bytes(metrics)
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path)])
    message = str(stop.value.code)
    assert "\n" not in message and message.startswith(f"error: {broken}: not a run's per-epoch")
    assert reason in message and not (tmp_path / "budget.md").exists()


@pytest.mark.parametrize("seed_list", ["one two", "1 2.5"])
def test_a_table_whose_seed_list_is_not_integers_is_named_in_one_line(tmp_path, seed_list):
    _every_twenty_epochs(tmp_path / "runs")
    table = tmp_path / "results.csv"
    table.write_text(f"method,base_method,seeds,seed_list\nncl,ncl,2,{seed_list}\n")
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path)])
    assert str(stop.value.code) == (
        f"error: {table}: row ncl: seed_list {seed_list!r} is not a list of seeds (whole "
        "numbers separated by spaces, e.g. '1 2 3'); fix the row, or pass --methods to read "
        "the runs without the table"
    )

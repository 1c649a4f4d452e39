"""The gate's background measures over a results folder: recorded, kept beside a run or computed
once from its checkpoint, and the table of gates.md with hand-computed figures."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import fake_result

from solo_bayesncl.benchmark.machine import git_state
from study.background_gates import (
    GATE_KEYS,
    MEASURES_FILE,
    PROBABILITY_KEYS,
    main,
    open_rate_differences,
    with_gate_measures,
)

MEASURED = {
    "ungated_background_dims_share": 0.8,
    "open_rate_background_dims": 0.5,
    "open_rate_class_dims": 0.75,
    "open_rate_lift_correlation": -0.25,
}
PROBABILITIES = {"gate_probability_background_dims": 0.875, "gate_probability_class_dims": 0.625}


def _scenes_result(run_dir: Path, method="bayesncl", seed=1, gated=True, **background) -> dict:
    ckpt = run_dir / "pretrain" / "m" / "last-ep=2.ckpt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_bytes(b"weights")
    result = fake_result(
        method,
        seed,
        0.1,
        checkpoint=str(ckpt),
        background={"background_dims_share": 0.7, **background},
        commit="a" * 40,
    )
    if gated:
        result["gate_open_rate"] = {"mean": 0.5, "dims_never_open": 0}
    return result


class Counting:
    def __init__(self, values={**MEASURED, **PROBABILITIES}):  # noqa: B006 (never mutated)
        self.calls: list[Path] = []
        self.values = values

    def __call__(self, checkpoint: Path) -> dict[str, float]:
        self.calls.append(checkpoint)
        return dict(self.values)


def test_measures_are_computed_once_from_the_checkpoint_and_kept_beside_the_run(tmp_path):
    run_dir = tmp_path / "runs" / "bayesncl-seed1-abc"
    result = _scenes_result(run_dir)
    before = json.dumps(result, sort_keys=True)
    measure = Counting()
    filled = with_gate_measures(run_dir, result, measure, log=lambda _: None)
    assert measure.calls == [Path(result["checkpoint"])]
    assert filled["background"] == {"background_dims_share": 0.7, **MEASURED, **PROBABILITIES}
    assert json.dumps(result, sort_keys=True) == before  # the run's own record is not changed
    kept = json.loads((run_dir / MEASURES_FILE).read_text())
    assert kept == {**MEASURED, **PROBABILITIES, "gate_measured_at_commit": git_state()["commit"]}
    assert filled["gate_measured_at_commit"] == git_state()["commit"]
    again = with_gate_measures(run_dir, result, measure, log=lambda _: None)
    assert len(measure.calls) == 1 and again == filled


def test_recorded_measures_and_runs_without_a_gate_or_scenes_are_left_alone(tmp_path):
    measure = Counting()
    recorded = _scenes_result(tmp_path / "a", **MEASURED, **PROBABILITIES)
    assert with_gate_measures(tmp_path / "a", recorded, measure) is recorded
    ncl = _scenes_result(tmp_path / "b", method="ncl", gated=False)
    assert with_gate_measures(tmp_path / "b", ncl, measure) is ncl
    fashion = fake_result("bayesncl", 1, 0.1, gate_open_rate={"mean": 0.5})
    assert with_gate_measures(tmp_path / "c", fashion, measure) is fashion
    assert measure.calls == []
    assert not list(tmp_path.rglob(MEASURES_FILE))


def test_a_moved_results_folder_still_finds_the_checkpoint(tmp_path):
    old = tmp_path / "old" / "runs" / "r1"
    result = _scenes_result(old)
    new = tmp_path / "new" / "runs" / "r1"
    new.parent.mkdir(parents=True)
    old.rename(new)
    measure = Counting()
    with_gate_measures(new, result, measure, log=lambda _: None)
    assert measure.calls == [new / "pretrain" / "m" / "last-ep=2.ckpt"]


def test_a_missing_checkpoint_or_an_incomplete_kept_file_is_a_one_line_error(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    result = _scenes_result(run_dir)
    Path(result["checkpoint"]).unlink()
    with pytest.raises(
        SystemExit, match=r"r1/result.json: its checkpoint .*last-ep=2.ckpt is missing"
    ):
        with_gate_measures(run_dir, result, Counting())
    (run_dir / MEASURES_FILE).write_text(json.dumps({"open_rate_class_dims": 0.5}))
    with pytest.raises(SystemExit, match=f"{MEASURES_FILE}: lacks ungated_background_dims_share"):
        with_gate_measures(run_dir, result, Counting())


def test_gate_probabilities_come_from_the_checkpoint_while_it_exists(tmp_path):
    """A run recorded before the gate probabilities existed: its recorded figures stay, the
    probabilities are measured once from its checkpoint; without the checkpoint they are left
    out (no error: its other gate measures are all there)."""
    measure = Counting({**MEASURED, "open_rate_class_dims": 0.0, **PROBABILITIES})
    run_dir = tmp_path / "runs" / "recorded"
    recorded = _scenes_result(run_dir, **MEASURED)
    filled = with_gate_measures(run_dir, recorded, measure, log=lambda _: None)
    assert filled["background"] == {"background_dims_share": 0.7, **MEASURED, **PROBABILITIES}
    assert len(measure.calls) == 1
    assert with_gate_measures(run_dir, recorded, measure, log=lambda _: None) == filled
    assert len(measure.calls) == 1  # kept beside the run, not measured again
    gone = tmp_path / "runs" / "gone"
    old = _scenes_result(gone, **MEASURED)
    Path(old["checkpoint"]).unlink()
    assert with_gate_measures(gone, old, measure) is old
    assert len(measure.calls) == 1 and not (gone / MEASURES_FILE).exists()


def test_a_kept_file_without_probabilities_is_remeasured_only_if_the_checkpoint_exists(tmp_path):
    run_dir = tmp_path / "runs" / "r1"
    result = _scenes_result(run_dir)
    (run_dir / MEASURES_FILE).write_text(json.dumps({**MEASURED, "gate_measured_at_commit": "b"}))
    measure = Counting()
    filled = with_gate_measures(run_dir, result, measure, log=lambda _: None)
    assert len(measure.calls) == 1
    assert set(PROBABILITY_KEYS) <= set(json.loads((run_dir / MEASURES_FILE).read_text()))
    assert filled["background"]["gate_probability_class_dims"] == 0.625
    other = tmp_path / "runs" / "r2"
    result = _scenes_result(other)
    Path(result["checkpoint"]).unlink()
    (other / MEASURES_FILE).write_text(json.dumps({**MEASURED, "gate_measured_at_commit": "b"}))
    filled = with_gate_measures(other, result, measure, log=lambda _: None)
    assert len(measure.calls) == 1
    assert filled["background"] == {"background_dims_share": 0.7, **MEASURED}
    assert filled["gate_measured_at_commit"] == "b"


def test_an_undefined_measure_is_kept_as_strict_json_null(tmp_path):
    # every gate open: the open-rate/lift correlation is undefined (NaN), which strict JSON lacks
    run_dir = tmp_path / "runs" / "bayesncl_concrete-seed1-abc"
    result = _scenes_result(run_dir, "bayesncl_concrete")
    measure = Counting({**MEASURED, "open_rate_lift_correlation": math.nan, **PROBABILITIES})
    filled = with_gate_measures(run_dir, result, measure, log=lambda _: None)
    text = (run_dir / MEASURES_FILE).read_text()
    assert '"open_rate_lift_correlation": null' in text and "NaN" not in text
    assert filled["background"]["open_rate_lift_correlation"] is None
    # read back from the kept file, the run is the same as when it was measured
    assert with_gate_measures(run_dir, result, measure, log=lambda _: None) == filled
    assert len(measure.calls) == 1


def test_a_run_without_class_dimensions_has_no_open_rate_difference(tmp_path):
    bg = dict(MEASURED, open_rate_class_dims=None)
    results = [
        _scenes_result(tmp_path / "a", **bg),
        _scenes_result(tmp_path / "b", seed=2, **MEASURED),
    ]
    assert open_rate_differences(results)["bayesncl"]["n"] == 1


def test_open_rate_difference_is_within_each_run_with_a_t_interval_over_seeds(tmp_path):
    results = [
        _scenes_result(
            tmp_path / "1", seed=1, open_rate_class_dims=0.80, open_rate_background_dims=0.76
        ),
        _scenes_result(
            tmp_path / "2", seed=2, open_rate_class_dims=0.70, open_rate_background_dims=0.68
        ),
        _scenes_result(tmp_path / "3", method="ncl", gated=False),
    ]
    (diff,) = open_rate_differences(results).values()
    half = 12.7062047 * math.sqrt(2) * 0.01 / math.sqrt(2)  # std of (0.04, 0.02) is 0.01 * sqrt(2)
    assert diff["n"] == 2
    assert diff["mean"] == pytest.approx(0.03)
    assert diff["low"] == pytest.approx(0.03 - half)
    assert diff["high"] == pytest.approx(0.03 + half)
    assert "ncl" not in open_rate_differences(results)


def _write_run(out: Path, name: str, result: dict) -> Path:
    run_dir = out / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "result.json").write_text(json.dumps(result))
    return run_dir


def test_command_writes_gates_md_with_each_row(tmp_path, capsys):
    out = tmp_path / "results"
    for seed, (cls, bg) in enumerate(((0.9, 0.6), (0.8, 0.7)), start=1):
        run = out / "runs" / f"bayesncl-{seed}"
        values = dict(MEASURED, open_rate_class_dims=cls, open_rate_background_dims=bg)
        if seed == 1:
            values.update(PROBABILITIES)
        result = _scenes_result(run, seed=seed, **values)
        if seed == 2:
            Path(result["checkpoint"]).unlink()  # gone: no probabilities to measure
        _write_run(out, run.name, result)
    _write_run(out, "ncl-1", _scenes_result(out / "runs" / "ncl-1", "ncl", gated=False))
    assert main([str(out)]) == 0
    text = (out / "gates.md").read_text()
    assert "3 finished runs on fashion-mnist-scenes (commits aaaaaaaaaaaa), mean" in text
    assert "| ncl | 1 | 0.700 | - | - | - | - | - | - |" in text
    # class - background: 0.3 and 0.1, mean 0.2, std sqrt(0.02), half-width 12.7062 * 0.1;
    # the probabilities from seed 1 only (recorded; seed 2's checkpoint is gone)
    assert (
        "| bayesncl | 2 | 0.700 +- 0.000 | 0.800 +- 0.000 | 0.650 +- 0.071 | 0.850 +- 0.071 "
        "| 0.875 (n=1) | 0.625 (n=1) | +0.200 [-1.071, +1.471] |" in text
    )
    assert capsys.readouterr().out.strip().endswith(f"[out]  {out / 'gates.md'}")


def test_command_reads_the_rows_of_the_folders_table_by_default(tmp_path):
    # the runs folder is shared with another preset whose row the folder's table does not list
    out = tmp_path / "results"
    for name, method in (("bayesncl-1", "bayesncl"), ("ncl-1", "ncl")):
        run = out / "runs" / name
        _write_run(
            out,
            name,
            _scenes_result(run, method, gated=method != "ncl", **MEASURED, **PROBABILITIES),
        )
    (out / "results.csv").write_text("method,base_method,seeds\nncl,ncl,1\n")
    assert main([str(out)]) == 0
    text = (out / "gates.md").read_text()
    assert "| ncl | 1 |" in text and "| bayesncl |" not in text
    assert main([str(out), "--methods", "ncl,bayesncl"]) == 0
    assert "| bayesncl | 1 |" in (out / "gates.md").read_text()


def test_measures_taken_afterwards_name_the_commit_that_took_them(tmp_path):
    out = tmp_path / "results"
    run = out / "runs" / "bayesncl-1"
    _write_run(out, run.name, _scenes_result(run))
    kept = {**MEASURED, **PROBABILITIES, "gate_measured_at_commit": "b" * 40}
    (run / MEASURES_FILE).write_text(json.dumps(kept))
    assert main([str(out)]) == 0
    text = (out / "gates.md").read_text()
    assert (
        "(commits aaaaaaaaaaaa; the gate measured afterwards, from the final checkpoints, at bbbbbbbbbbbb)"
        in text
    )


def test_command_errors_name_the_folder(tmp_path):
    with pytest.raises(SystemExit, match="runs does not exist: pass a benchmark results folder"):
        main([str(tmp_path)])
    _write_run(tmp_path, "r", fake_result("ncl", 1, 0.1))
    with pytest.raises(SystemExit, match="no finished run on fashion-mnist-scenes"):
        main([str(tmp_path)])
    assert not (tmp_path / "gates.md").exists()
    assert set(GATE_KEYS) == set(MEASURED)


@pytest.mark.parametrize("text", ['{"open_rate_class_dims": 0.', "[0.5]"])
def test_a_half_written_kept_measures_file_is_named_in_one_line(tmp_path, text):
    """A kept ``gate_measures.json`` cut short is named, with what to do, never a traceback; it
    is not measured over silently either (it is a kept record)."""
    run_dir = tmp_path / "runs" / "r1"
    result = _scenes_result(run_dir)
    kept = run_dir / MEASURES_FILE
    kept.write_text(text)
    measure = Counting()
    with pytest.raises(SystemExit) as stop:
        with_gate_measures(run_dir, result, measure)
    message = str(stop.value.code)
    assert "\n" not in message and measure.calls == []
    assert message.startswith(f"error: {kept}: not the gate measures of a run (")
    assert message.endswith("remove it and they are measured again from the run's checkpoint")
    assert kept.read_text() == text

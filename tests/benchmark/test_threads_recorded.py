"""The benchmark gives all its runs one thread count, records it in each ``result.json`` and on
the table's machine line, and refuses another count for a results folder whose runs trained with
one (their figures would not compare)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import REPO, fake_result, tiny_preset_file

from solo_bayesncl.benchmark.presets import PresetError, load_preset
from solo_bayesncl.benchmark.runner import benchmark_threads
from solo_bayesncl.benchmark.table import aggregate, machine_line, write_csv, write_markdown
from solo_bayesncl.core.threads import usable_cores


@pytest.mark.parametrize(
    ("counts", "line"),
    [
        (
            [2, 2],
            "Machine: every run trained on 2 CPU threads (`threads`) on a machine of 4 cores.",
        ),
        ([1], "Machine: every run trained on 1 CPU thread (`threads`) on a machine of 4 cores."),
        (
            [1, 2],
            "Machine: the runs trained on 1 and 2 CPU threads (`threads`) on a machine of 4 "
            "cores; figures of different counts differ by more than rounding.",
        ),
        ([None], "Machine: the runs recorded no thread count on a machine of 4 cores."),
    ],
)
def test_the_tables_machine_line_says_the_runs_thread_count(tmp_path, counts, line):
    results = [
        fake_result("bayesncl", seed, 0.2, threads=count, cpu_count=4)
        for seed, count in enumerate(counts)
    ]
    rows = aggregate(results)
    assert machine_line(rows) == line
    md = write_markdown(rows, tmp_path / "t.md", "unit", "abc", "2026-12-07").read_text()
    assert md.splitlines()[2] == line
    csv_text = write_csv(rows, tmp_path / "t.csv", "abc", "2026-12-07").read_text()
    assert "threads" in csv_text.splitlines()[0]


def test_the_count_is_given_else_the_finished_runs_else_resolved(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    runs = tmp_path / "runs"
    assert benchmark_threads([], 3, runs) == (3, "--threads")
    assert benchmark_threads([{"threads": 1}], None, runs)[0] == 1
    assert benchmark_threads([], None, runs)[0] == usable_cores()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert benchmark_threads([{"threads": None}], None, runs)[0] == 1
    with pytest.raises(PresetError) as err:
        benchmark_threads([{"threads": 1}], 2, runs)
    assert str(err.value) == (
        f"--threads 2: the finished runs in {runs} trained with 1 threads, and a benchmark gives "
        "all its runs one count; give --threads 1, or another --out"
    )


def test_a_bad_threads_option_is_refused_naming_it():
    done = subprocess.run(
        [sys.executable, "-m", "solo_bayesncl.benchmark", "--preset", "cpu", "--threads", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "argument --threads: '0' is not a positive number of threads" in done.stderr


@pytest.mark.slow
@pytest.mark.solo
def test_every_run_records_the_benchmarks_count_and_another_is_refused(image_folder, tmp_path):
    from solo_bayesncl.benchmark.runner import run_benchmark

    out = tmp_path / "results"
    preset = load_preset(tiny_preset_file(tmp_path / "tiny.yaml", image_folder, out))
    log: list[str] = []
    (result,) = run_benchmark(preset, log=log.append, progress=False, threads=1)
    assert "[threads] 1 per run (--threads); the table's machine line records it" in log
    assert result["threads"] == 1
    (run,) = out.glob("runs/*")
    assert json.loads((run / "result.json").read_text())["threads"] == 1
    assert json.loads((run / "spec.json").read_text())["threads"] == 1
    (args,) = (run / "pretrain").glob("*/*/args.json")
    assert json.loads(args.read_text())["threads"] == 1
    (linear_args,) = (run / "linear").glob("*/*/args.json")
    assert json.loads(linear_args.read_text())["threads"] == 1
    assert (
        "Machine: every run trained on 1 CPU thread (`threads`)" in (out / "results.md").read_text()
    )

    with pytest.raises(PresetError, match="the finished runs in .* trained with 1 threads"):
        run_benchmark(preset, log=log.append, progress=False, threads=2)
    log.clear()
    run_benchmark(preset, log=log.append, progress=False)  # follows the finished runs
    assert any(line.startswith("[threads] 1 per run (the count the finished runs") for line in log)

"""The timing scripts in ``microbenchmarks/``: their shared set-up (threads, quiet warnings, the
load summary), their refusal of bad arguments, and one tiny run of the train-step script printing
its figures without library warnings in between (skipped without solo-learn)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
from helpers import REPO

sys.path.insert(0, str(REPO / "microbenchmarks"))
import bench_loss  # noqa: E402
import bench_train_step  # noqa: E402


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "microbenchmarks" / name), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        },
    )


def test_load_summary_warns_only_when_the_median_exceeds_the_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    quiet = bench_train_step.load_summary([0.5, 1.0, 3.0])
    assert quiet == (
        "1-minute load average during the run: median 1.0 (min 0.5, max 3.0) on 2 logical CPUs"
    )
    busy = bench_train_step.load_summary([2.5, 4.0, 6.0])
    assert busy.startswith("1-minute load average during the run: median 4.0 (min 2.5, max 6.0)")
    assert busy.endswith("wall times are inflated; compare CPU times and paired ratios")


def test_loss_ratios_pair_the_rounds():
    """The loss benchmark's ratio is the median of per-round ratios, not a ratio of medians:
    a round slowed for both paths by another process cancels out."""
    assert bench_loss.paired_ratio([2.0, 40.0, 9.0], [1.0, 40.0, 3.0]) == 2.0  # medians: 9/3
    calls: list[str] = []
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    times = bench_loss.time_rounds(steps, repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4  # interleaved, one warm-up round
    assert {clock: {k: len(v) for k, v in t.items()} for clock, t in times.items()} == {
        "wall": {"a": 3, "b": 3},
        "cpu": {"a": 3, "b": 3},
    }


def test_prepare_process_sets_threads_and_hides_library_warnings():
    before = torch.get_num_threads()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            bench_train_step.prepare_process(1)
            assert torch.get_num_threads() == 1
            warnings.warn("a library hint", UserWarning, stacklevel=1)
            warnings.warn("old API", FutureWarning, stacklevel=1)
        finally:
            torch.set_num_threads(before)
    assert caught == []


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("bench_train_step.py", ["--steps", "0"], "--steps must be >= 1, got 0"),
        ("bench_train_step.py", ["--precision", "16"], "--precision 16 needs --device cuda"),
        ("bench_pipeline.py", ["--variants", "fast/w2"], "'fast/w2' is not one of model"),
        ("bench_pipeline.py", ["--rounds", "0"], "--rounds must be >= 1, got 0"),
        ("bench_dali.py", ["--loaders", "dali/t0"], "DALI needs at least one thread"),
        ("bench_dali.py", ["--folder", "no-such-folder"], "'no-such-folder' is not a folder"),
    ],
)
def test_bad_arguments_are_refused_naming_the_option(script, args, message):
    done = _script(script, *args)
    assert done.returncode == 2
    assert message in done.stderr.strip().splitlines()[-1]


@pytest.mark.long
@pytest.mark.solo
def test_tiny_train_step_run_prints_its_figures_and_no_warnings():
    done = _script(
        "bench_train_step.py",
        *("--batch-size", "4", "--steps", "2", "--warmup", "0", "--proj", "32", "16"),
        "--compare-small-map-convs",
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    other = "bayesncl small-map convs as convolutions"
    for method in ("bayesncl", "ncl", "simclr", other):
        assert f"\n{method:<{len(other)}} " in out  # a row of the step-time table
    assert "bayesncl/ncl   : ratio of medians" in out and "verdict:" in out
    assert "small-map convs as products (performance.small_map_convs)" in out
    assert f"{other} / bayesncl (contiguous, eager): paired per round: median" in out
    assert "Warning" not in done.stderr, done.stderr
    assert "Seed set" not in out + done.stderr  # Lightning's notice, once per model


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_gpu_check_without_a_gpu_points_at_the_dry_run(tmp_path):
    done = _script("gpu_check.py", "--out", str(tmp_path / "check"))
    assert done.returncode == 2
    assert "no CUDA device is available; use --dry-run" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "check").exists()


@pytest.mark.long
def test_gpu_check_dry_run_writes_every_figure_to_one_summary(tmp_path):
    pytest.importorskip("solo", reason="needs upstream solo-learn installed")
    out = tmp_path / "check"
    done = _script("gpu_check.py", "--dry-run", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (out / "summary.md").read_text()
    for name in ("train_step_32", "pipeline", "metrics"):
        assert f"## {name}: ok, " in summary, summary
        assert (out / f"{name}.txt").is_file()
    assert "bayesncl/ncl   : ratio of medians" in summary  # the step ratios
    assert "GFLOP" in summary  # the FLOP count and its share of the limit
    assert "bayesncl compiled / bayesncl (contiguous, eager): paired per round" in summary
    assert "batch/w0" in summary and "per_image/w0" in summary  # images/s of both loaders
    assert "whole set (accumulator)" in summary and "values agree" in summary  # the metrics

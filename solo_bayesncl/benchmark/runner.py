"""Runs every (method, seed) of a preset, skipping finished runs, then writes table and plots."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from solo_bayesncl.benchmark.presets import Preset

__all__ = ["run_benchmark", "run_key", "write_outputs"]


def run_key(preset: Preset, method: str, seed: int) -> str:
    """A hash of everything that defines a run: the method's config file and every override."""
    base = preset.base_method(method)
    config_text = (preset.config_dir / f"{base}.yaml").read_text()
    payload = {
        "method": base,
        "seed": seed,
        "config": config_text,
        "overrides": preset.overrides,
        "method_overrides": preset.run_overrides(method)[len(preset.overrides) :],
        "linear": preset.linear,
        "knn": preset.knn,
        "report": preset.report,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_outputs(
    results: list[dict[str, Any]], out_dir: Path, preset_name: str
) -> dict[str, Path]:
    """``results.md``, ``results.csv``, ``paired_differences.csv``,
    ``accuracy_vs_consistency.png``, ``metrics_over_epochs.png`` and, when BayesNCL's prior is
    swept, ``prior_sweep.png``."""
    from solo_bayesncl.benchmark.plots import (
        plot_accuracy_vs_consistency,
        plot_metrics_over_epochs,
        plot_prior_sweep,
    )
    from solo_bayesncl.benchmark.table import (
        aggregate,
        paired_differences,
        write_csv,
        write_markdown,
        write_paired_csv,
    )

    commit, date = _commit(), dt.date.today().isoformat()
    rows = aggregate(results)
    paired = paired_differences(results)
    outputs = {
        "markdown": write_markdown(
            rows, out_dir / "results.md", preset_name, commit, date, paired=paired
        ),
        "csv": write_csv(rows, out_dir / "results.csv", commit, date),
        "paired_csv": write_paired_csv(paired, out_dir / "paired_differences.csv", commit),
        "accuracy_plot": plot_accuracy_vs_consistency(
            results, out_dir / "accuracy_vs_consistency.png"
        ),
        "epochs_plot": plot_metrics_over_epochs(results, out_dir / "metrics_over_epochs.png"),
    }
    sweep = plot_prior_sweep(results, out_dir / "prior_sweep.png")
    if sweep is not None:
        outputs["prior_plot"] = sweep
    return outputs


def _finished(result_file: Path, protocol: str) -> bool:
    """A run is finished when its result exists (with the paper figures when asked for)."""
    if not result_file.is_file():
        return False
    return protocol != "paper" or "metrics_paper" in json.loads(result_file.read_text())


def run_benchmark(
    preset: Preset, out_dir: Path | None = None, log=print, protocol: str = "standard"
) -> list[dict[str, Any]]:
    """Runs the preset; returns the results of every run (finished earlier or now).

    ``protocol="paper"`` adds the official BayesNCL evaluation's figures to every run (a finished
    run only gets that missing stage) and to the table."""
    out_dir = Path(out_dir or preset.out_dir).resolve()
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    results = []
    for seed in preset.seeds:
        for method in preset.methods:
            key = run_key(preset, method, seed)
            run_dir = out_dir / "runs" / f"{method}-seed{seed}-{key}"
            result_file = run_dir / "result.json"
            if _finished(result_file, protocol):
                log(f"[skip] {method} seed {seed}: finished ({run_dir.name})")
            else:
                run_dir.mkdir(parents=True, exist_ok=True)
                spec = {
                    "method": preset.base_method(method),
                    "variant": method,
                    "seed": seed,
                    "run_key": key,
                    "config_dir": str(preset.config_dir),
                    "overrides": preset.run_overrides(method),
                    "linear": preset.linear,
                    "knn": preset.knn,
                    "report": preset.report,
                    "protocol": protocol,
                }
                (run_dir / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")
                log(f"[run]  {method} seed {seed} -> {run_dir}")
                with open(run_dir / "log.txt", "a") as logfile:
                    proc = subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "solo_bayesncl.benchmark.run_one",
                            str(run_dir / "spec.json"),
                        ],
                        stdout=logfile,
                        stderr=subprocess.STDOUT,
                    )
                if proc.returncode != 0 or not result_file.is_file():
                    raise RuntimeError(
                        f"{method} seed {seed} failed (exit {proc.returncode}); see {run_dir / 'log.txt'}"
                    )
            results.append(json.loads(result_file.read_text()))
    outputs = write_outputs(results, out_dir, preset.name)
    for name, path in outputs.items():
        log(f"[out]  {name}: {path}")
    return results

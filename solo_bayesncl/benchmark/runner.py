"""Runs every (method, seed) of a preset, each in a child process
(:mod:`solo_bayesncl.benchmark.process`), skipping finished runs, then writes table and plots.
A run another live benchmark trains raises :class:`RunBusy`, or with ``--leave-busy`` is left
to it, so several benchmarks share one preset's runs."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from solo_bayesncl.benchmark.paired import paired_differences
from solo_bayesncl.benchmark.plots import (
    plot_accuracy_vs_consistency,
    plot_budget_curves,
    plot_metrics_over_epochs,
    plot_prior_sweep,
)
from solo_bayesncl.benchmark.presets import Preset, PresetError, RunOrder
from solo_bayesncl.benchmark.process import RunBusy, RunFailed, run_lock, train_in_child
from solo_bayesncl.benchmark.progress import ProgressDisplay, RunProgress, StageTimes
from solo_bayesncl.benchmark.records import (
    RecordsError,
    add_commit_lines,
    keep_run_records,
    load_result,
    read_result,
    records_to_keep,
)
from solo_bayesncl.benchmark.table import aggregate, write_csv, write_markdown, write_paired_csv
from solo_bayesncl.config.shipped import linear_dir_for
from solo_bayesncl.core.threads import resolve_threads
from solo_bayesncl.core.validation import INPUT_ERRORS, first_line
from solo_bayesncl.io.files import NotWritableError, replacing_folder, require_writable
from solo_bayesncl.training.pretrain import prepare_pretrain

__all__ = [
    "RunBusy",
    "RunFailed",
    "benchmark_threads",
    "check_configs",
    "check_seeds",
    "run_benchmark",
    "run_key",
    "write_tables",
]


def results_folder(preset: Preset, out_dir: Path | None) -> Path:
    """``out_dir`` or the preset's, checked writable first (:class:`PresetError` otherwise)."""
    out = Path(out_dir or preset.out_dir).expanduser().resolve()
    where = "--out" if out_dir else f"{preset.source}: out_dir"
    try:
        require_writable(out, what=where)
    except NotWritableError as err:
        raise PresetError(str(err)) from None
    return out


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


def run_folder_name(preset: Preset, method: str, seed: int) -> str:
    """The name of a run's folder under ``RESULTS_DIR/runs``: ``<method>-seed<seed>-<run key>``."""
    return f"{method}-seed{seed}-{run_key(preset, method, seed)}"


def check_configs(preset: Preset) -> dict[str, int]:
    """Composes and checks every method's config with the preset's overrides before anything
    trains, naming preset and method on a refusal; returns each method's ``max_epochs``."""
    epochs = {}
    for method in preset.methods:
        overrides = preset.run_overrides(method)
        try:
            with initialize_config_dir(config_dir=str(preset.config_dir), version_base="1.2"):
                cfg = compose(config_name=f"{preset.base_method(method)}.yaml", overrides=overrides)
            OmegaConf.set_struct(cfg, False)
            max_epochs = prepare_pretrain(cfg, check_data=False).trainer.max_epochs
        except (HydraException, OmegaConfBaseException, *INPUT_ERRORS) as err:
            raise PresetError(f"{preset.source}: {method}: {first_line(err)}") from None
        if max_epochs is None:
            raise PresetError(f"{preset.source}: {method}: max_epochs must be set")
        epochs[method] = max_epochs
    return epochs


def _short_commit(result: dict[str, Any]) -> str:
    commit = str(result.get("commit", "unknown"))
    short = "+".join(c[:12] for c in commit.split("+"))
    return short + ("-dirty" if result.get("dirty") is True else "")


def write_outputs(
    results: list[dict[str, Any]],
    out_dir: Path,
    preset_name: str,
    missing: list[str] | tuple[str, ...] = (),
    unreadable: list[str] | tuple[str, ...] = (),
) -> dict[str, Path]:
    """The tables and plots, moved in together; ``missing`` and ``unreadable`` runs listed."""
    commit = ", ".join(sorted({_short_commit(r) for r in results})) or "unknown"
    date = dt.date.today().isoformat()
    rows = aggregate(results)
    paired = paired_differences(results)
    writers = {
        "markdown": (
            "results.md",
            lambda p: write_markdown(
                rows, p, preset_name, commit, date, paired, missing, unreadable
            ),
        ),
        "csv": ("results.csv", lambda p: write_csv(rows, p, commit, date)),
        "paired_csv": ("paired_differences.csv", lambda p: write_paired_csv(paired, p, commit)),
        "accuracy_plot": (
            "accuracy_vs_consistency.png",
            lambda p: plot_accuracy_vs_consistency(results, p),
        ),
        "epochs_plot": ("metrics_over_epochs.png", lambda p: plot_metrics_over_epochs(results, p)),
        "prior_plot": ("prior_sweep.png", lambda p: plot_prior_sweep(results, p)),
        "budget_plot": ("budget_curves.png", lambda p: plot_budget_curves(results, p)),
    }
    outputs = {}
    # all written, then moved in together: a full disk leaves the previous tables as they were
    with replacing_folder(out_dir, suffix=".tables") as staging:
        for key, (name, write) in writers.items():
            if write(staging / name) is None:  # nothing to draw (the prior sweep without a sweep)
                (staging / name).unlink(missing_ok=True)
                continue
            outputs[key] = out_dir / name
    return outputs


def write_tables(
    preset: Preset, out_dir: Path | None = None, protocol: str = "standard", log=print
) -> list[dict[str, Any]]:
    """The table and plots of the preset's finished runs, without training; the others listed as
    not finished or unreadable, then :class:`RecordsError` names the first unreadable one."""
    out_dir = results_folder(preset, out_dir)
    results, missing, unreadable = [], [], {}
    for seed in preset.seeds:
        for method in preset.methods:
            run_dir = out_dir / "runs" / run_folder_name(preset, method, seed)
            try:
                if _finished(run_dir / "result.json", protocol):
                    results.append(read_result(run_dir))
                else:
                    missing.append(f"{method} seed {seed}")
            except RecordsError as err:
                unreadable[f"{method} seed {seed}"] = err
                log(f"[unreadable] {method} seed {seed}: {err}")
    first = next(iter(unreadable.values()), None)
    if not results:
        raise first or RunFailed(f"no finished run of preset {preset.name} in {out_dir / 'runs'}")
    listed = [f"{run} ({str(err).replace(f'{out_dir}/', '')})" for run, err in unreadable.items()]
    for name, path in write_outputs(results, out_dir, preset.name, missing, listed).items():
        log(f"[out]  {name}: {path}")
    if missing:
        log(f"[todo] not finished: {', '.join(missing)}")
    if first is not None:
        raise RecordsError(
            f"{first}; the table of the other runs is written, listing {len(unreadable)} "
            f"unreadable run{'s' * (len(unreadable) > 1)}"
        )
    return results


def keep_records(
    preset: Preset, source_dir: Path, out_dir: Path | None = None, log=print
) -> list[dict[str, Any]]:
    """Copies the records of the preset's runs finished in ``source_dir`` to ``out_dir`` (every run
    checked first: :class:`PresetError`), adds their ``COMMIT`` lines and writes the tables."""
    out_dir = results_folder(preset, out_dir)
    source_runs = Path(source_dir).expanduser().resolve() / "runs"
    if not source_runs.is_dir():
        raise PresetError(
            f"{source_runs} does not exist: pass the results folder the runs trained in"
        )
    names = [
        run_folder_name(preset, method, seed) for seed in preset.seeds for method in preset.methods
    ]
    finished = [name for name in names if (source_runs / name / "result.json").is_file()]
    if not finished:
        raise PresetError(f"no finished run of preset {preset.name} in {source_runs}")
    try:  # every record of every run read and checked first: a refusal writes nothing
        results = [read_result(source_runs / name) for name in finished]
        for name in finished:
            records_to_keep(source_runs / name, out_dir / "runs" / name)
        for name in finished:
            copied = keep_run_records(source_runs / name, out_dir / "runs" / name)
            log(f"[keep] {name}: {', '.join(copied) if copied else 'already kept'}")
    except RecordsError as err:
        raise PresetError(str(err)) from None
    for line in add_commit_lines(out_dir, results):
        log(f"[keep] COMMIT: {line}")
    return write_tables(preset, out_dir, log=log)


def check_seeds(preset: Preset, seeds: Sequence[int] | None) -> None:
    """Refuses (:class:`PresetError`) a ``--seeds`` value that is not one of the preset's."""
    unknown = sorted(set(seeds or ()) - set(preset.seeds))
    if unknown:
        raise PresetError(
            f"--seeds {unknown[0]} is not a seed of preset {preset.name}; its seeds: "
            + ", ".join(str(s) for s in preset.seeds)
        )


def _finished(result_file: Path, protocol: str) -> bool:
    """The result exists (with the paper figures for ``paper``); RecordsError when unreadable."""
    if not result_file.is_file():
        return False
    return protocol != "paper" or "metrics_paper" in load_result(result_file)


def _run_order(
    preset: Preset, method: str, seed: int, protocol: str, threads: int | None = None
) -> RunOrder:
    """What a run's child process (``run_one``) reads from ``RUN_DIR/spec.json``."""
    return RunOrder(
        method=preset.base_method(method),
        variant=method,
        seed=seed,
        run_key=run_key(preset, method, seed),
        config_dir=str(preset.config_dir),
        linear_config_dir=str(linear_dir_for(preset.config_dir)),
        overrides=preset.run_overrides(method),
        linear=preset.linear,
        knn=preset.knn,
        report=preset.report_options(protocol),
        threads=threads,
    )


def benchmark_threads(
    finished: Sequence[dict[str, Any]], given: int | None, runs_dir: Path
) -> tuple[int, str]:
    """The one thread count of every run and its source: ``given``, else the ``finished`` runs',
    else as a run resolves it; :class:`PresetError` for a count other than the finished runs'."""
    recorded = sorted({int(r["threads"]) for r in finished if r.get("threads") is not None})
    if given is not None:
        count, source = resolve_threads(given), "--threads"
    elif len(recorded) == 1:
        count, source = recorded[0], f"the count the finished runs in {runs_dir} trained with"
    else:
        count, source = resolve_threads(), "OMP_NUM_THREADS, else the cores this process may use"
    if recorded and recorded != [count]:
        raise PresetError(
            f"--threads {count}: the finished runs in {runs_dir} trained with "
            f"{' and '.join(map(str, recorded))} threads, and a benchmark gives all its runs one "
            f"count; give --threads {recorded[0]}, or another --out"
        )
    return count, source


def _train_unless_finished(
    preset: Preset,
    method: str,
    seed: int,
    run_dir: Path,
    protocol: str,
    display,
    run_progress,
    log,
    threads: int | None = None,
) -> bool:
    """Trains a run under its lock unless it finished; True when it trained here."""
    result_file = run_dir / "result.json"
    if not _finished(result_file, protocol):
        run_dir.mkdir(parents=True, exist_ok=True)
        with run_lock(run_dir, f"{method} seed {seed}"):
            if not _finished(result_file, protocol):
                order = _run_order(preset, method, seed, protocol, threads)
                train_in_child(order, run_dir, display, run_progress, log)
                return True
    log(f"[skip] {method} seed {seed}: finished ({run_dir.name})")
    if display is not None:
        display.skip_run(run_progress)
    return False


def run_benchmark(
    preset: Preset,
    out_dir: Path | None = None,
    log=print,
    progress: bool = True,
    protocol: str = "standard",
    seeds: Sequence[int] | None = None,
    leave_busy: bool = False,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """Runs the preset on one thread count (:func:`benchmark_threads`); returns every run's
    results. ``seeds``: only those; ``protocol="paper"`` adds the official evaluation's figures.
    An interrupted or failed run keeps its finished stages, and the same call resumes."""

    out_dir = results_folder(preset, out_dir)
    epochs = check_configs(preset)
    linear_epochs = int(preset.linear.get("max_epochs", 100))
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    log(f"[out]  results folder: {out_dir}")
    check_seeds(preset, seeds)
    plan = [
        (seed, method)
        for seed in preset.seeds
        if seeds is None or seed in seeds
        for method in preset.methods
    ]
    progresses = [RunProgress(epochs[m], linear_epochs) for _, m in plan]
    folders = [out_dir / "runs" / run_folder_name(preset, method, seed) for seed, method in plan]
    times = StageTimes()  # the pace of every stage, as the finished runs measured it
    finished = [read_result(f) for f in folders if (f / "result.json").is_file()]
    for result in finished:
        times.learn(result, linear_epochs)
    count, source = benchmark_threads(finished, threads, out_dir / "runs")
    log(f"[threads] {count} per run ({source}); the table's machine line records it")
    total = sum(run.total for run in progresses)
    display = ProgressDisplay(total, runs=progresses, times=times) if progress else None
    if display is not None and log is print:
        log = display.write  # printed lines above the progress bar
    results = []
    left_busy = False
    try:
        for (seed, method), run_dir, run_progress in zip(plan, folders, progresses, strict=True):
            try:
                trained = _train_unless_finished(
                    preset, method, seed, run_dir, protocol, display, run_progress, log, count
                )
            except RunBusy as busy:
                if not leave_busy:
                    raise
                log(
                    f"[busy] {method} seed {seed}: left to the benchmark training it "
                    f"({busy.holder})"
                )
                if display is not None:
                    display.skip_run(run_progress)
                left_busy = True
                continue
            if trained:
                log(f"[done] {method} seed {seed}: {run_dir / 'result.json'}")
                times.learn(load_result(run_dir / "result.json"), linear_epochs)
            results.append(read_result(run_dir))
    finally:
        if display is not None:
            display.close()
            if log == display.write:
                log = print
    if seeds is not None or left_busy:
        return write_tables(preset, out_dir, protocol=protocol, log=log)
    outputs = write_outputs(results, out_dir, preset.name)
    for name, path in outputs.items():
        log(f"[out]  {name}: {path}")
    return results

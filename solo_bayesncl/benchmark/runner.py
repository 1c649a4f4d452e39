"""Runs every (method, seed) of a preset, skipping finished runs, then writes table and plots.

Each run is a child process (:mod:`solo_bayesncl.benchmark.process`: signals forwarded, the
run's lock); it reports its progress in ``status.json``, shown here as one progress display.
A run another live benchmark is training is refused with :class:`RunBusy`, or, asked to leave
busy runs (``--leave-busy``), left to the other and the next one trained, so that several
benchmarks share one preset's runs (one per GPU, or one per CPU core).
"""

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
from solo_bayesncl.benchmark.presets import Preset, PresetError
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
from solo_bayesncl.core.validation import INPUT_ERRORS, first_line
from solo_bayesncl.io.files import NotWritableError, replacing, require_writable
from solo_bayesncl.training.pretrain import prepare_pretrain_cfg

__all__ = [
    "RunBusy",
    "RunFailed",
    "check_configs",
    "check_seeds",
    "run_benchmark",
    "run_key",
    "write_outputs",
    "write_tables",
]


def results_folder(preset: Preset, out_dir: Path | None) -> Path:
    """The results folder (``out_dir`` or the preset's), checked to be a writable folder before
    anything is done; raises :class:`PresetError` naming it otherwise."""
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
    """Composes every method's config with the preset's overrides, before anything trains, so
    that a bad override fails here naming the preset and the method; returns each method's
    ``max_epochs``."""
    epochs = {}
    for method in preset.methods:
        overrides = preset.run_overrides(method)
        try:
            with initialize_config_dir(config_dir=str(preset.config_dir), version_base="1.2"):
                cfg = compose(config_name=f"{preset.base_method(method)}.yaml", overrides=overrides)
            max_epochs = OmegaConf.select(cfg, "max_epochs", default=None)
        except (HydraException, OmegaConfBaseException, ValueError) as err:
            message = str(err).strip().splitlines()[0]
            raise PresetError(f"{preset.source}: {method}: {message}") from None
        if not isinstance(max_epochs, int) or isinstance(max_epochs, bool) or max_epochs < 1:
            raise PresetError(
                f"{preset.source}: {method}: max_epochs must be a positive int, got {max_epochs!r}"
            )
        epochs[method] = max_epochs
        _check_with_plugin(preset, method, cfg)
    return epochs


def _check_with_plugin(preset: Preset, method: str, cfg) -> None:
    """Every check pretraining runs on its config (keys, ranges, names), the data excepted, so
    that a bad override is refused here, naming the preset, the method and the key, before any
    run starts."""
    OmegaConf.set_struct(cfg, False)
    try:
        prepare_pretrain_cfg(cfg, check_data=False)
    except INPUT_ERRORS as err:
        raise PresetError(f"{preset.source}: {method}: {first_line(err)}") from None


def _short_commit(result: dict[str, Any]) -> str:
    commit = str(result.get("commit", "unknown"))
    short = "+".join(c[:12] for c in commit.split("+"))
    return short + ("-dirty" if result.get("dirty") is True else "")


def write_outputs(
    results: list[dict[str, Any]],
    out_dir: Path,
    preset_name: str,
    missing: list[str] | tuple[str, ...] = (),
) -> dict[str, Path]:
    """``results.md``, ``results.csv``, ``paired_differences.csv``,
    ``accuracy_vs_consistency.png``, ``metrics_over_epochs.png``, when BayesNCL's prior is
    swept ``prior_sweep.png`` and, when the runs logged the converged probe,
    ``budget_curves.png`` (each written to a temporary name and renamed, so none is ever
    half-written)."""
    commit = ", ".join(sorted({_short_commit(r) for r in results})) or "unknown"
    date = dt.date.today().isoformat()
    rows = aggregate(results)
    paired = paired_differences(results)
    writers = {
        "markdown": (
            "results.md",
            lambda p: write_markdown(
                rows, p, preset_name, commit, date, paired=paired, missing=missing
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
    for key, (name, write) in writers.items():
        final = out_dir / name
        with replacing(final, suffix=final.suffix) as tmp:
            if write(tmp) is None:  # nothing to draw (the prior sweep without a sweep)
                tmp.unlink()
                continue
        outputs[key] = final
    return outputs


def write_tables(
    preset: Preset, out_dir: Path | None = None, protocol: str = "standard", log=print
) -> list[dict[str, Any]]:
    """Writes the table and plots from the preset's finished runs only, without training; the
    runs not finished yet are listed under the table and counted nowhere."""
    out_dir = results_folder(preset, out_dir)
    results, missing = [], []
    for seed in preset.seeds:
        for method in preset.methods:
            run_dir = out_dir / "runs" / run_folder_name(preset, method, seed)
            if _finished(run_dir / "result.json", protocol):
                results.append(read_result(run_dir))
            else:
                missing.append(f"{method} seed {seed}")
    if not results:
        raise RunFailed(f"no finished run of preset {preset.name} in {out_dir / 'runs'}")
    for name, path in write_outputs(results, out_dir, preset.name, missing).items():
        log(f"[out]  {name}: {path}")
    if missing:
        log(f"[todo] not finished: {', '.join(missing)}")
    return results


def keep_records(
    preset: Preset, source_dir: Path, out_dir: Path | None = None, log=print
) -> list[dict[str, Any]]:
    """Keeps the preset's runs that finished in ``source_dir`` (a results folder the runs trained
    in, such as a pinned worktree's) in ``out_dir`` (the committed folder, default the preset's):
    copies each one's records, adds its commit to ``COMMIT``, then writes the table and plots as
    :func:`write_tables` does. Trains nothing; an unfinished run is listed, never kept.

    Every run is checked before any file is written: a run trained from uncommitted changes, or
    whose records differ from those already kept under its name, raises :class:`PresetError`
    naming the file, and ``out_dir`` is left as it was.
    """
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
    try:
        results = [load_result(source_runs / name / "result.json") for name in finished]
        for name in finished:  # every check first: a refusal writes nothing
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
    """Raises :class:`PresetError` naming the first of ``seeds`` (``--seeds``) that is not one
    of the preset's, and the preset's seeds."""
    unknown = sorted(set(seeds or ()) - set(preset.seeds))
    if unknown:
        raise PresetError(
            f"--seeds {unknown[0]} is not a seed of preset {preset.name}; its seeds: "
            + ", ".join(str(s) for s in preset.seeds)
        )


def _finished(result_file: Path, protocol: str) -> bool:
    """A run is finished when its result exists (with the paper figures when asked for);
    :class:`~solo_bayesncl.benchmark.records.RecordsError` when the figures are to be read from
    a result that is not one."""
    if not result_file.is_file():
        return False
    return protocol != "paper" or "metrics_paper" in load_result(result_file)


def _run_spec(preset: Preset, method: str, seed: int, protocol: str) -> dict[str, Any]:
    """What a run's child process (``run_one``) reads from ``RUN_DIR/spec.json``."""
    return {
        "method": preset.base_method(method),
        "variant": method,
        "seed": seed,
        "run_key": run_key(preset, method, seed),
        "config_dir": str(preset.config_dir),
        "linear_config_dir": str(linear_dir_for(preset.config_dir)),
        "overrides": preset.run_overrides(method),
        "linear": preset.linear,
        "knn": preset.knn,
        "report": preset.report,
        "protocol": protocol,
    }


def _train_unless_finished(
    preset: Preset,
    method: str,
    seed: int,
    run_dir: Path,
    protocol: str,
    display,
    run_progress,
    log,
) -> bool:
    """Trains a run, holding its lock, unless it finished (earlier, or in the benchmark that held
    the lock before); True when it trained here. :class:`RunBusy` when another live benchmark
    is training it."""
    result_file = run_dir / "result.json"
    if not _finished(result_file, protocol):
        run_dir.mkdir(parents=True, exist_ok=True)
        with run_lock(run_dir, f"{method} seed {seed}"):
            if not _finished(result_file, protocol):
                spec = _run_spec(preset, method, seed, protocol)
                train_in_child(spec, run_dir, display, run_progress, log)
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
) -> list[dict[str, Any]]:
    """Runs the preset; returns the results of every run (finished earlier or now).

    ``seeds`` runs only those of the preset's seeds (for instance seed by seed across several
    presets, or on several machines); the table then covers every finished run of the preset
    and lists the others as not finished.

    ``protocol="paper"`` adds the official BayesNCL evaluation's figures to every run (a finished
    run only gets that missing stage) and to the table. Raises :class:`~solo_bayesncl.benchmark.process.Interrupted` when stopped
    by a signal and :class:`RunFailed` when a run fails; in both cases every stage that finished
    is kept and the same call resumes. Raises :class:`RunBusy` when another live benchmark is
    training a run of this results folder (nothing is trained twice), unless ``leave_busy``:
    then that run is left to the other benchmark, the next one trains, and the table covers the
    finished runs and lists the others as not finished, as with ``seeds``.
    """
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
    for folder in folders:
        if (folder / "result.json").is_file():
            times.learn(load_result(folder / "result.json"), linear_epochs)
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
                    preset, method, seed, run_dir, protocol, display, run_progress, log
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

"""A results folder broken by hand or by a crash: a corrupt or half-written ``result.json``, a
run's ``lock`` that is a folder, ``--seeds`` the preset does not have. Every command ends in one
line naming the file (or the option) and what is allowed, with status 2, never a traceback,
and a refusal writes nothing."""

from __future__ import annotations

import json

import pytest
from helpers import REPO, fake_result

from solo_bayesncl.benchmark.presets import load_preset
from solo_bayesncl.benchmark.runner import run_key

pytestmark = pytest.mark.solo

HALF_WRITTEN = '{"method": "ncl", "seed": 1, "linear_top1": 80.0, "metr'


def _preset(tmp_path, methods=("ncl", "bayesncl"), seeds=(1, 2)):
    path = tmp_path / "p.yaml"
    path.write_text(
        f"config_dir: {REPO / 'scripts/pretrain/cifar'}\n"
        f"methods: [{', '.join(methods)}]\nseeds: [{', '.join(map(str, seeds))}]\n"
        "overrides: [max_epochs=1]\n"
    )
    return load_preset(path)


def _run_dir(preset, folder, method, seed):
    return folder / "runs" / f"{method}-seed{seed}-{run_key(preset, method, seed)}"


def _finish(preset, folder, method, seed, text=None, **extra):
    run_dir = _run_dir(preset, folder, method, seed)
    run_dir.mkdir(parents=True)
    result = fake_result(method, seed, 0.2, commit=f"c{seed}", dirty=False, **extra)
    (run_dir / "result.json").write_text(json.dumps(result) if text is None else text)
    return run_dir


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    return err[-1]


def _files(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


def test_keeping_records_with_a_corrupt_result_names_it_and_keeps_nothing(tmp_path, capsys):
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path)
    trained, kept = tmp_path / "trained", tmp_path / "kept"
    _finish(preset, trained, "ncl", 1)
    broken = _finish(preset, trained, "bayesncl", 1, text=HALF_WRITTEN) / "result.json"
    argv = ["--preset", str(preset.source), "--out", str(kept), "--keep-records-from", str(trained)]
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: {broken}: not a finished run's result (not valid JSON")
    assert "remove it" in line
    assert not any(p.is_file() for p in kept.rglob("*")) if kept.exists() else True


def test_a_result_that_is_valid_json_but_no_result_is_named_too(tmp_path, capsys):
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path)
    out = tmp_path / "out"
    broken = _finish(preset, out, "ncl", 1, text="[1, 2]") / "result.json"
    assert main(["--preset", str(preset.source), "--out", str(out), "--table-only"]) == 2
    assert _one_error_line(capsys).startswith(
        f"error: {broken}: not a finished run's result (a JSON list, not an object"
    )


def test_table_only_over_a_half_written_result_names_it(tmp_path, capsys):
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path)
    out = tmp_path / "out"
    _finish(preset, out, "ncl", 1)
    broken = _finish(preset, out, "ncl", 2, text=HALF_WRITTEN) / "result.json"
    assert main(["--preset", str(preset.source), "--out", str(out), "--table-only"]) == 2
    assert _one_error_line(capsys).startswith(f"error: {broken}: not a finished run's result")
    assert "Unreadable, so in no figure above: ncl seed 2 (" in (out / "results.md").read_text()
    # with the paper protocol the file is read to decide whether the run is finished: the same,
    # and with no other run finished there is no table
    (out / "results.md").unlink()
    argv = ["--preset", str(preset.source), "--out", str(out), "--table-only"]
    assert main([*argv, "--protocol", "paper"]) == 2
    assert _one_error_line(capsys).startswith(f"error: {broken}: not a finished run's result")
    assert not (out / "results.md").exists()


NOT_TEXT = bytes(range(128, 256)) * 4
"""Bytes that are no UTF-8 text (a file of random bytes)."""
SHAPES = {
    # case -> (the run's file, what replaces it: a result's fields or the file's content,
    #          the reason the one error line gives)
    "empty result": ("result.json", "{}", "field 'method' is missing"),
    "a word for a figure": (
        "result.json",
        {"linear_top1": "abc"},
        "field 'linear_top1' must be a number or null, got 'abc'",
    ),
    "no metrics object": ("result.json", {"metrics": None}, "field 'metrics' must be an object"),
    "a word in the metrics": (
        "result.json",
        {"metrics": {"active_dims": "many"}},
        "field 'metrics.active_dims' must be a number or null, got 'many'",
    ),
    "metrics csv of random bytes": ("pretrain_metrics.csv", NOT_TEXT, "not UTF-8 text"),
    "a word in the metrics csv": (
        "pretrain_metrics.csv",
        "epoch,val_acc1\n0,50.0\n1,abc\n",
        "line 3, column 'val_acc1': 'abc' is not a number",
    ),
}


def _break(preset, folder, case, seed=2):
    """A finished ``ncl`` run of ``seed`` whose record is replaced as :data:`SHAPES` says; the
    replaced file."""
    name, bad, _ = SHAPES[case]
    run_dir = _run_dir(preset, folder, "ncl", seed)
    if name == "result.json" and isinstance(bad, str):
        return _finish(preset, folder, "ncl", seed, text=bad) / name
    fields = bad if name == "result.json" else {"pretrain_metrics_csv": name}
    _finish(preset, folder, "ncl", seed, **fields)
    record = run_dir / name
    if name != "result.json":
        record.write_bytes(bad if isinstance(bad, bytes) else bad.encode())
    return record


@pytest.mark.parametrize("case", list(SHAPES))
def test_table_only_lists_a_run_of_the_wrong_shape_as_unreadable_and_tables_the_rest(
    tmp_path, capsys, case
):
    """A record of the right syntax but the wrong shape: one line naming the file and the field
    (line, column), status 2, and the table of the other runs, listing this one as unreadable."""
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path)
    out = tmp_path / "out"
    _finish(preset, out, "ncl", 1)
    _finish(preset, out, "bayesncl", 1)
    broken = _break(preset, out, case)
    assert main(["--preset", str(preset.source), "--out", str(out), "--table-only"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: {broken}: not ") and f"({SHAPES[case][2]}" in line
    assert line.endswith("the table of the other runs is written, listing 1 unreadable run")
    table = (out / "results.md").read_text()
    assert "| ncl | 1 |" in table and "| bayesncl | 1 |" in table
    unreadable = f"Unreadable, so in no figure above: ncl seed 2 ({broken.relative_to(out)}: "
    assert unreadable in table and SHAPES[case][2] in table and str(tmp_path) not in table


@pytest.mark.parametrize("case", ["empty result", "metrics csv of random bytes"])
def test_keeping_records_refuses_a_record_of_the_wrong_shape_before_writing(tmp_path, capsys, case):
    """``--keep-records-from`` refuses the whole copy, naming the file and the field, before it
    writes anything: a partial copy would change the study's table unseen."""
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path)
    trained, kept = tmp_path / "trained", tmp_path / "kept"
    _finish(preset, trained, "ncl", 1)
    _finish(preset, trained, "bayesncl", 1)
    if case == "empty result":  # the one field the copy itself reads
        broken = _finish(preset, trained, "ncl", 2, text='{"dirty": false}') / "result.json"
    else:
        broken = _break(preset, trained, case)
    argv = ["--preset", str(preset.source), "--out", str(kept), "--keep-records-from", str(trained)]
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"error: {broken}: not ") and f"({SHAPES[case][2]})" in line
    assert not kept.exists()  # nothing written, not even the folder


@pytest.mark.parametrize(
    "text", [HALF_WRITTEN, '{"method": "ncl", "seed": "one"}'], ids=["half-written", "shape"]
)
def test_a_benchmark_over_a_half_written_result_names_it_before_training(tmp_path, capsys, text):
    """Resuming reads every finished run's result through the same loader: a result cut short,
    or of the wrong shape, is named before anything trains."""
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path, methods=("ncl",), seeds=(1, 2))
    out = tmp_path / "out"
    broken = _finish(preset, out, "ncl", 2, text=text) / "result.json"
    assert main(["--preset", str(preset.source), "--out", str(out)]) == 2
    assert _one_error_line(capsys).startswith(f"error: {broken}: not a finished run's result")
    assert not any(out.glob("runs/*/log.txt"))  # nothing was trained, not even seed 1


def test_a_lock_that_is_a_folder_is_named(tmp_path, capsys):
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path, methods=("ncl",), seeds=(1,))
    out = tmp_path / "out"
    lock = _run_dir(preset, out, "ncl", 1) / "lock"
    lock.mkdir(parents=True)
    assert main(["--preset", str(preset.source), "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert line == (
        f"error: ncl seed 1: its lock {lock} is a folder, not a lock file; remove it "
        "(nothing of the run is in it) and run the same command again"
    )
    assert not (lock.parent / "log.txt").exists()  # nothing was trained


def test_the_run_lock_names_a_folder_in_its_place(tmp_path):
    from solo_bayesncl.benchmark.process import RunLockError, run_lock

    (tmp_path / "lock").mkdir()
    folder_refused = pytest.raises(RunLockError, match=r"^ncl seed 1: its lock .*/lock is a folder")
    with folder_refused, run_lock(tmp_path, "ncl seed 1"):
        pass
    (tmp_path / "lock").rmdir()
    with run_lock(tmp_path, "ncl seed 1"):  # a lock file, as usual
        assert (tmp_path / "lock").is_file()
    # an error inside the block is the block's, never taken for the lock's
    with pytest.raises(OSError, match="the run's own"), run_lock(tmp_path, "ncl seed 1"):
        raise OSError("the run's own")


@pytest.mark.parametrize("mode", ["--table-only", "--keep-records-from"])
def test_seeds_the_preset_does_not_have_are_refused_without_training(tmp_path, capsys, mode):
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path)
    out, trained = tmp_path / "out", tmp_path / "trained"
    _finish(preset, out, "ncl", 1)
    _finish(preset, trained, "ncl", 1)
    argv = ["--preset", str(preset.source), "--out", str(out), "--seeds", "99"]
    argv += [mode] if mode == "--table-only" else [mode, str(trained)]
    before = _files(out)
    assert main(argv) == 2
    assert _one_error_line(capsys) == "error: --seeds 99 is not a seed of preset p; its seeds: 1, 2"
    assert _files(out) == before


def test_table_only_with_seeds_of_the_preset_says_the_table_covers_every_run(tmp_path, capsys):
    from solo_bayesncl.cli.benchmark import main

    preset = _preset(tmp_path)
    out = tmp_path / "out"
    _finish(preset, out, "ncl", 1)
    _finish(preset, out, "ncl", 2)
    argv = ["--preset", str(preset.source), "--out", str(out), "--seeds", "2", "--table-only"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert (
        "[note] --seeds 2: the table covers every finished run of preset p (--seeds chooses "
        "the runs to train)" in printed
    )
    assert "| ncl | 2 |" in (out / "results.md").read_text()

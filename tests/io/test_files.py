"""The one way a file or a folder of files is replaced: a temporary beside it, then renames."""

from __future__ import annotations

import os
import stat

import pytest

from solo_bayesncl.io.files import replacing, replacing_folder, write_text_replacing


def test_replacing_swaps_the_whole_new_file_in_and_leaves_no_temporary(tmp_path):
    final = tmp_path / "sub" / "result.json"
    write_text_replacing(final, "old")
    with replacing(final) as tmp:
        tmp.write_text("new")
        assert final.read_text() == "old"  # nothing visible before the block ends
    assert final.read_text() == "new"
    assert sorted(p.name for p in final.parent.iterdir()) == ["result.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(final.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0o600


def test_an_error_or_a_removed_temporary_leaves_the_old_file(tmp_path):
    final = tmp_path / "plot.png"
    final.write_text("old")
    with pytest.raises(RuntimeError), replacing(final, suffix=".png") as tmp:
        assert tmp.suffix == ".png"
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    with replacing(final, suffix=".png") as tmp:
        tmp.unlink()  # nothing to write after all
    assert final.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]


def test_replacing_folder_keeps_other_files_removes_stale_ones_and_moves_the_index_last(
    tmp_path, monkeypatch
):
    final = tmp_path / "report"
    final.mkdir()
    for name, text in (("notes.txt", "mine"), ("gate.png", "stale"), ("metrics.json", "old")):
        (final / name).write_text(text)
    moved = []
    real = os.replace
    with replacing_folder(final, stale=("gate.png",), last=("metrics.json",)) as staging:
        for name in ("metrics.json", "a.png", "z.png"):
            (staging / name).write_text("new")
        monkeypatch.setattr(
            os, "replace", lambda a, b: (moved.append(os.path.basename(b)), real(a, b))
        )
    monkeypatch.undo()
    assert moved == ["a.png", "z.png", "metrics.json"]
    assert sorted(p.name for p in final.iterdir()) == [
        "a.png",
        "metrics.json",
        "notes.txt",
        "z.png",
    ]
    assert (final / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no staging folder left


def test_replacing_folder_creates_the_folder_in_one_rename_and_an_error_leaves_nothing(tmp_path):
    with pytest.raises(KeyError), replacing_folder(tmp_path / "a") as staging:
        (staging / "x").write_text("1")
        raise KeyError("boom")
    assert list(tmp_path.iterdir()) == []
    with replacing_folder(tmp_path / "a") as staging:
        (staging / "x").write_text("1")
    assert (tmp_path / "a" / "x").read_text() == "1" and len(list(tmp_path.iterdir())) == 1

"""The ``solo`` marker skips a test by itself when solo-learn is missing (a ``conftest`` hook)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "root_conftest", Path(__file__).with_name("conftest.py")
)
conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conftest)


class _Item:
    def __init__(self, marked: bool) -> None:
        self.keywords = {"solo": True} if marked else {}
        self.markers: list = []

    def add_marker(self, marker) -> None:
        self.markers.append(marker)


def test_the_solo_marker_skips_with_a_reason_without_solo_learn(monkeypatch):
    items = [_Item(marked=True), _Item(marked=False)]
    monkeypatch.setattr(conftest, "solo_learn_available", lambda: False)
    conftest.pytest_collection_modifyitems(None, items)
    assert [m.name for m in items[0].markers] == ["skip"]
    assert items[0].markers[0].kwargs["reason"] == "needs upstream solo-learn installed"
    assert items[1].markers == []


def test_the_solo_marker_runs_the_test_with_solo_learn(monkeypatch):
    items = [_Item(marked=True)]
    monkeypatch.setattr(conftest, "solo_learn_available", lambda: True)
    conftest.pytest_collection_modifyitems(None, items)
    assert items[0].markers == []

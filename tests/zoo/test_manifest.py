"""The zoo manifest: the shipped file obeys the schema, and the schema rejects bad entries."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from solo_bayesncl.cli.zoo import main
from solo_bayesncl.zoo import (
    MANIFEST_FORMAT,
    ManifestError,
    UnknownModelError,
    find_entry,
    list_models,
    read_manifest,
    validate_entry,
)
from solo_bayesncl.zoo.manifest import FIELD_DOCS, OPTIONAL_FIELDS, REQUIRED_FIELDS

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "zoo" / "manifest.json"

GOOD = {
    "name": "bayesncl-resnet18-cifar100",
    "method": "bayesncl",
    "dataset": "cifar100",
    "backbone": "resnet18",
    "urls": ["https://example.org/a.pt", "https://mirror.example.org/a.pt"],
    "sha256": "ab" * 32,
    "size": 44_800_000,
    "config": {
        "method": "bayesncl",
        "backbone": {"name": "resnet18"},
        "data": {"dataset": "cifar100"},
    },
    "metrics": {"val_acc1": 60.7, "consistency": 0.22},
}


@pytest.fixture(autouse=True)
def _no_user_manifest(monkeypatch):
    monkeypatch.delenv("SOLO_BAYESNCL_MANIFEST", raising=False)


def test_shipped_manifest_follows_schema():
    doc = json.loads(SHIPPED.read_text())
    assert doc["format"] == MANIFEST_FORMAT
    assert isinstance(doc["models"], list)
    names = [m["name"] for m in doc["models"]]
    assert len(names) == len(set(names))
    for entry in doc["models"]:  # plain checks, independent of validate_entry
        assert set(REQUIRED_FIELDS) <= set(entry)
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
        assert isinstance(entry["size"], int) and entry["size"] > 0
        assert any(u.startswith("https://") for u in entry["urls"])
    assert [e.name for e in read_manifest(SHIPPED)] == names
    assert [e.name for e in list_models()] == names


def test_every_field_is_documented_once(capsys):
    """FIELD_DOCS is the one description of the fields: the manifest does not repeat it and the
    ``fields`` command prints it."""
    assert set(FIELD_DOCS) == set(REQUIRED_FIELDS) | set(OPTIONAL_FIELDS)
    assert set(json.loads(SHIPPED.read_text())) == {"format", "models"}
    assert main(["fields"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(FIELD_DOCS)
    for line, (name, doc) in zip(printed, FIELD_DOCS.items(), strict=True):
        assert line.split()[0] == name and line.endswith(doc)


def test_readme_matches_what_is_published():
    readme = (ROOT / "zoo" / "README.md").read_text()
    published = read_manifest(SHIPPED)
    if not published:
        assert "no published weights" in readme.lower()
    for entry in published:
        assert entry.name in readme


def test_good_entry_passes():
    validate_entry(GOOD)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sha256": "AB" * 32}, "64 lowercase hex"),
        ({"sha256": "ab" * 31}, "64 lowercase hex"),
        ({"size": 0}, "positive integer"),
        ({"size": True}, "positive integer"),
        ({"urls": []}, "non-empty list"),
        ({"urls": "https://example.org/a.pt"}, "non-empty list"),
        ({"urls": ["http://example.org/a.pt"]}, "not an https URL"),
        ({"urls": ["http://127.0.0.1:8000/a.pt"]}, "not an https URL"),
        ({"method": "byol"}, "bayesncl"),
        ({"name": "Has Space"}, "name must match"),
        ({"dataset": "cifar10"}, "disagrees with its config"),
        ({"metrics": {"acc": "high"}}, "metric 'acc' must be a finite number, got 'high'"),
        ({"metrics": {"acc": float("nan")}}, "metric 'acc' must be a finite number, got nan"),
        ({"config": {}}, "non-empty training config"),
        ({"dtype": "bfloat16"}, "float32"),
        ({"extra": 1}, "unknown field"),
    ],
)
def test_bad_entries_are_rejected(change, message):
    bad = copy.deepcopy(GOOD)
    bad.update(change)
    with pytest.raises(ManifestError, match=re.escape(message)):
        validate_entry(bad, source="m.json")


def test_missing_field_is_named():
    bad = {k: v for k, v in GOOD.items() if k != "sha256"}
    with pytest.raises(ManifestError, match=r"m.json: entry 'bayesncl-resnet18-cifar100'.*sha256"):
        validate_entry(bad, source="m.json")


def test_loopback_http_only_when_allowed():
    local = dict(GOOD, urls=["http://127.0.0.1:8000/a.pt"])
    validate_entry(local, require_https=False)
    with pytest.raises(ManifestError):
        validate_entry(dict(GOOD, urls=["http://example.org/a.pt"]), require_https=False)


def _write(path: Path, models: list, fmt: str = MANIFEST_FORMAT) -> Path:
    path.write_text(json.dumps({"format": fmt, "models": models}))
    return path


def test_manifest_file_errors(tmp_path):
    with pytest.raises(ManifestError, match="listed twice"):
        read_manifest(_write(tmp_path / "dup.json", [GOOD, GOOD]))
    with pytest.raises(ManifestError, match="'format' must be"):
        read_manifest(_write(tmp_path / "fmt.json", [], fmt="other/1"))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ManifestError, match="broken.json is not valid JSON"):
        read_manifest(tmp_path / "broken.json")
    with pytest.raises(ManifestError, match="does not exist"):
        read_manifest(tmp_path / "absent.json")


def test_user_manifests_extend_the_list(tmp_path, monkeypatch):
    mine = _write(tmp_path / "mine.json", [GOOD])
    monkeypatch.setenv("SOLO_BAYESNCL_MANIFEST", str(mine))
    names = [e.name for e in list_models()]
    assert "bayesncl-resnet18-cifar100" in names
    assert find_entry("bayesncl-resnet18-cifar100").urls == tuple(GOOD["urls"])
    with pytest.raises(UnknownModelError, match="available: bayesncl-resnet18-cifar100"):
        find_entry("simclr-x")


def test_cli_list_with_an_empty_manifest_says_what_to_do(tmp_path, monkeypatch, capsys):
    """Issue 25 (10): two lines: nothing published yet; export your own or convert the official
    NCL checkpoints, with the guide that says how (which exists and names the official README's
    section)."""
    from solo_bayesncl.zoo import manifest

    empty = _write(tmp_path / "empty.json", [])
    monkeypatch.setattr(manifest, "PROJECT_MANIFEST", empty)
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0] == f"No published weights yet (manifest: {empty})."
    assert "python -m solo_bayesncl.zoo export RUN.ckpt --name NAME" in lines[1]
    assert "PKU-ML/non_neg" in lines[1] and "'Pretrained Checkpoints'" in lines[1]
    guide = re.search(r"see (\S+)\.$", lines[1]).group(1)
    text = (ROOT / guide).read_text(encoding="utf-8")
    assert "github.com/PKU-ML/non_neg" in text and "Pretrained Checkpoints" in text
    assert main(["list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []  # machine-readable: no advice mixed in


def test_cli_list_and_check(tmp_path, monkeypatch, capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    if not read_manifest(SHIPPED):
        assert out.startswith("No published weights yet")
    mine = _write(tmp_path / "mine.json", [GOOD])
    monkeypatch.setenv("SOLO_BAYESNCL_MANIFEST", str(mine))
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "bayesncl-resnet18-cifar100" in out and "val_acc1=60.7" in out
    assert main(["list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[-1]["sha256"] == GOOD["sha256"]
    assert main(["check", str(mine)]) == 0
    assert "1 entry, schema OK" in capsys.readouterr().out
    bad = _write(tmp_path / "bad.json", [dict(GOOD, size=-1)])
    assert main(["check", str(bad)]) == 2
    assert "size must be a positive integer" in capsys.readouterr().err

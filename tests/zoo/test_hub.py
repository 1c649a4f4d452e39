"""The zoo on the Hugging Face Hub, with no network: a Hub folder export (safetensors, config,
model card), its loading, and ``hf://`` entries downloaded through huggingface_hub from a local
server on 127.0.0.1 that answers as the Hub does.

The server speaks the Hub's download protocol for a file at a revision: ``HEAD``/``GET
/{repo}/resolve/{revision}/{file}`` answers 302 to a "CDN" (a second server: another origin, so
huggingface_hub reads the file's metadata from the redirect itself, as it does for LFS files)
with ``X-Repo-Commit``, ``X-Linked-Etag`` (the sha256), ``X-Linked-Size`` and ``ETag``; an
unknown repository, revision or file is a 404 with the Hub's ``X-Error-Code``. The CDN serves
the bytes, a cut transfer (the full ``Content-Length`` announced, half sent, then closed,
and the host down from then on) or a trickle (a byte every 0.2 s). A ``silent`` Hub accepts
every request and never answers.
``HF_ENDPOINT`` and ``HF_HUB_CACHE`` point each test at its server and its own cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("solo", reason="needs upstream solo-learn")

import huggingface_hub  # noqa: E402
import yaml  # noqa: E402
from huggingface_hub import file_download  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from solo_bayesncl.cli.zoo import main  # noqa: E402
from solo_bayesncl.zoo import (  # noqa: E402
    ChecksumError,
    DownloadError,
    ManifestError,
    ZooEntry,
    download,
    export_hub_folder,
    hub_entry,
    load_artifact,
    load_model,
    parse_hub_url,
)
from solo_bayesncl.zoo import publish as publish_module  # noqa: E402

try:  # the model helpers and the plain loopback server live with the other zoo tests
    from test_download import make_entry, serving
    from test_zoo_models import make_model, outputs, save_run
except ImportError:  # tests/ imported as a package
    from tests.zoo.test_download import make_entry, serving
    from tests.zoo.test_zoo_models import make_model, outputs, save_run

pytestmark = pytest.mark.solo

REPO = "solo-test/bayesncl-toy"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
METRICS = {"linear": {"top1": 61.5}, "knn/top1": 55.0}


class HubServer:
    """A Hub (resolve endpoint) and its CDN on 127.0.0.1, each in a thread.

    ``files[(repo, commit)][filename] = bytes``; ``branches[(repo, name)] = commit``; a sha256 in
    ``cut`` is served cut short, after which its CDN host is down (``down``: the connection is
    closed with no answer, so huggingface_hub's resume attempts fail too); a sha256 in
    ``trickle`` is sent a byte every 0.2 s; a ``silent`` Hub answers no request (GET, HEAD,
    POST); a Hub given a ``status`` answers every request with it (no ``X-Error-Code``). Every
    request is recorded as ``(server, method, path)``.
    """

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], dict[str, bytes]] = {}
        self.branches: dict[tuple[str, str], str] = {}
        self.blobs: dict[str, bytes] = {}
        self.cut: set[str] = set()
        self.down: set[str] = set()
        self.trickle: set[str] = set()
        self.silent = False
        self.status: int | None = None
        self.stopping = threading.Event()
        self.requests: list[tuple[str, str, str]] = []
        self.cdn = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._cdn_handler())
        self.hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._hub_handler())
        self.endpoint = f"http://127.0.0.1:{self.hub.server_address[1]}"
        self.cdn_base = f"http://127.0.0.1:{self.cdn.server_address[1]}"
        for httpd in (self.hub, self.cdn):
            threading.Thread(target=httpd.serve_forever, daemon=True).start()

    def add(self, repo: str, commit: str, filename: str, data: bytes) -> str:
        self.files.setdefault((repo, commit), {})[filename] = data
        sha = hashlib.sha256(data).hexdigest()
        self.blobs[sha] = data
        return sha

    def hub_requests(self) -> list[tuple[str, str]]:
        return [(m, p) for s, m, p in self.requests if s == "hub"]

    def _hub_handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Hub(http.server.BaseHTTPRequestHandler):
            def _error(self, code: str, commit: str | None = None) -> None:
                body = json.dumps({"error": code}).encode()
                self.send_response(404)
                self.send_header("X-Error-Code", code)
                if commit:
                    self.send_header("X-Repo-Commit", commit)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body)

            def _resolve(self) -> None:
                server.requests.append(("hub", self.command, self.path))
                if server.silent:  # the connection stays open, with no answer
                    server.stopping.wait()
                    return
                if server.status is not None:
                    self.send_response(server.status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path)
                if match is None:
                    self._error("RepoNotFound")
                    return
                repo, revision, filename = match.groups()
                if not any(r == repo for r, _ in server.files):
                    self._error("RepoNotFound")
                    return
                commit = server.branches.get((repo, revision), revision)
                if (repo, commit) not in server.files:
                    self._error("RevisionNotFound")
                    return
                data = server.files[(repo, commit)].get(filename)
                if data is None:
                    self._error("EntryNotFound", commit)
                    return
                sha = hashlib.sha256(data).hexdigest()
                self.send_response(302)
                self.send_header("Location", f"{server.cdn_base}/blobs/{sha}")
                self.send_header("X-Repo-Commit", commit)
                self.send_header("X-Linked-Etag", f'"{sha}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("ETag", f'"{sha}"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET = do_POST = _resolve  # noqa: N815 - http.server's naming

            def log_message(self, *args) -> None:
                pass

        return Hub

    def _cdn_handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Cdn(http.server.BaseHTTPRequestHandler):
            def _serve(self) -> None:
                server.requests.append(("cdn", self.command, self.path))
                sha = self.path.rsplit("/", 1)[-1]
                if sha in server.down:  # the host died mid-transfer: no answer any more
                    self.close_connection = True
                    return
                data = server.blobs.get(sha)
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("ETag", f'"{sha}"')
                self.end_headers()
                if self.command == "HEAD":
                    return
                if sha in server.trickle:  # a byte every 0.2 s, until the client hangs up
                    for i in range(len(data)):
                        if server.stopping.wait(0.2):
                            return
                        try:
                            self.wfile.write(data[i : i + 1])
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                if sha in server.cut:  # half the announced bytes, then the host is down
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    server.down.add(sha)
                    return
                self.wfile.write(data)

            do_HEAD = do_GET = _serve  # noqa: N815 - http.server's naming

            def log_message(self, *args) -> None:
                pass

        return Cdn

    def close(self) -> None:
        self.stopping.set()
        for httpd in (self.hub, self.cdn):
            httpd.shutdown()
            httpd.server_close()


class _NoSleep:
    """``time`` for huggingface_hub's download module without the 1 s waits between its
    resume attempts (a cut transfer is retried five times)."""

    def __getattr__(self, name: str):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


@pytest.fixture
def hub(monkeypatch, tmp_path) -> Iterator[HubServer]:
    """The local Hub, pointed to by HF_ENDPOINT; a fresh Hugging Face cache and package cache;
    online, no token."""
    server = HubServer()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("SOLO_BAYESNCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for name in ("HF_HUB_OFFLINE", "SOLO_BAYESNCL_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(file_download, "time", _NoSleep())
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A small BayesNCL model (ResNet-18, CIFAR stem), its checkpoint and its Hub folder."""
    root = tmp_path_factory.mktemp("hub-export")
    model, cfg = make_model("bayesncl")
    ckpt = save_run(model, cfg, root / "run", metrics=METRICS)
    folder = export_hub_folder(ckpt, root / "bayesncl-toy", license="mit", repo_id=REPO)
    return model, ckpt, folder


def images() -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card[4 : card.index("\n---", 4)])


def snapshot_problems(cache: Path) -> list[str]:
    """Files under the Hugging Face cache's snapshots whose bytes fail their hash (the blob's
    name, the sha256 the Hub announced), and download leftovers."""
    problems = []
    for path in sorted(cache.rglob("*")):
        if "snapshots" in path.parts and path.is_file():
            blob = path.resolve()
            if hashlib.sha256(blob.read_bytes()).hexdigest() != blob.name:
                problems.append(f"{path} fails its hash")
        if path.name.endswith(".incomplete"):
            problems.append(f"{path} left by a transfer")
    return problems


def snapshot_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if "snapshots" in p.parts and p.is_file()]


def published(server: HubServer, folder, commit: str = COMMIT, sha256: str | None = None):
    """Put the folder's weights on the server at ``commit``; the manifest entry downloading it."""
    weights = folder.weights.read_bytes()
    server.add(REPO, commit, "model.safetensors", weights)
    server.branches[(REPO, "main")] = commit
    url = f"hf://{REPO}/model.safetensors@{commit}"
    entry = hub_entry(folder.weights, [url], "bayesncl-toy")
    if sha256 is not None:
        entry["sha256"] = sha256
    return ZooEntry.from_dict(entry)


# ---------------------------------------------------------------- the Hub folder


def test_hub_folder_holds_safetensors_config_and_a_model_card(exported):
    model, _, folder = exported
    assert sorted(p.name for p in folder.folder.iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    tensors = load_file(folder.weights)
    tops = {k.split(".", 1)[0] for k in tensors}
    assert {"backbone", "projector", "gating_head"} <= tops
    assert not any(t.startswith("momentum_") for t in tops)
    config = json.loads(folder.config.read_text())
    assert config["method"] == "bayesncl" and config["backbone"]["name"] == "resnet18"

    card = folder.card.read_text()
    meta = front_matter(card)
    assert meta["license"] == "mit" and meta["datasets"] == ["uoft-cs/cifar10"]
    assert "bayesncl" in meta["tags"] and "arxiv:2605.28441" in meta["tags"]
    assert "base_model" not in meta  # none given: none invented
    (result,) = meta["model-index"][0]["results"]
    figures = {m["name"]: (m["type"], m["value"]) for m in result["metrics"]}
    assert figures == {"linear/top1": ("accuracy", 61.5), "knn/top1": ("accuracy", 55.0)}
    assert result["dataset"]["type"] == "uoft-cs/cifar10"
    for section in ("## Method", "## Data", "## Budget", "## Recipe", "## How to load"):
        assert section in card
    assert "arXiv:2605.28441" in card and f'hf_hub_download("{REPO}"' in card
    assert "| epochs" not in card and "- epochs: 1" in card


def test_loading_the_hub_folder_gives_bit_equal_features(exported):
    model, _, folder = exported
    x = images()
    loaded = load_artifact(folder.folder)  # the folder, as downloaded from the Hub
    expected, got = outputs(model, x), outputs(loaded, x)
    assert type(loaded) is type(model) and got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
    backbone = load_artifact(folder.weights, as_="backbone")
    with torch.no_grad():
        assert torch.equal(backbone(x), model.backbone(x))


def test_the_cards_plain_pytorch_code_gives_the_same_features(exported, monkeypatch):
    """The card's torchvision + safetensors snippet, run as written, in the folder."""
    model, _, folder = exported
    card = folder.card.read_text()
    plain = card[card.index("With plain PyTorch") :]
    start = plain.index("```python\n") + len("```python\n")
    code = plain[start : plain.index("\n```", start)]
    monkeypatch.chdir(folder.folder)
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - the card's own code
    x = images()
    with torch.no_grad():
        assert torch.equal(scope["backbone"](x), model.backbone(x))


def test_cli_export_hub_folder(exported, tmp_path, capsys):
    _, ckpt, _ = exported
    out = tmp_path / "My Model"
    assert main(["export", str(ckpt), "--hub-folder", str(out), "--fp16"]) == 0
    printed = capsys.readouterr()
    assert "model.safetensors" in printed.out and "zoo publish" not in printed.out
    assert "--repo OWNER/NAME" in printed.err
    assert "# my-model" in (out / "README.md").read_text()  # the name, from the folder
    assert load_file(out / "model.safetensors")["backbone.conv1.weight"].dtype == torch.float16
    assert main(["export", str(ckpt), "--hub-folder", str(out)]) == 2  # no --overwrite
    assert "exists" in capsys.readouterr().err


def test_cli_export_hub_folder_onto_a_file_names_the_flag_and_keeps_the_file(
    exported, tmp_path, capsys
):
    _, ckpt, _ = exported
    mine = tmp_path / "notes.txt"
    mine.write_text("the user's")
    assert main(["export", str(ckpt), "--hub-folder", str(mine)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --hub-folder {mine}: {mine} exists and is not a folder"
    )
    assert mine.read_text() == "the user's"


# ---------------------------------------------------------------- hf:// sources


def test_hf_source_syntax():
    source = parse_hub_url(f"hf://{REPO}/sub/model.safetensors@{COMMIT}")
    assert (source.repo_id, source.filename, source.revision) == (
        REPO,
        "sub/model.safetensors",
        COMMIT,
    )
    for bad in (f"hf://{REPO}@{COMMIT}", f"hf://{REPO}/m.safetensors", "hf://a/b/c@main"):
        with pytest.raises(ValueError, match="hf://OWNER/REPO/FILE@REVISION|commit id"):
            parse_hub_url(bad)


def test_manifest_accepts_pinned_hf_sources_only(exported):
    _, _, folder = exported
    entry = hub_entry(folder.weights, [f"hf://{REPO}/model.safetensors@{COMMIT}"], "x")
    ZooEntry.from_dict(entry)
    entry["urls"] = [f"hf://{REPO}/model.safetensors@main"]
    with pytest.raises(ManifestError, match="not a commit id"):
        ZooEntry.from_dict(entry)


def test_hf_entry_downloads_verifies_and_loads_with_equal_features(hub, exported, tmp_path):
    model, _, folder = exported
    entry = published(hub, folder)
    path = download(entry, progress=False)
    assert path.read_bytes() == folder.weights.read_bytes()
    assert (tmp_path / "hf-cache") in path.parents  # huggingface_hub's cache, not ours
    assert hub.hub_requests() == [("HEAD", f"/{REPO}/resolve/{COMMIT}/model.safetensors")]

    loaded = load_model(entry, progress=False)  # pinned and cached: no request at all
    backbone = load_model(entry, as_="backbone", progress=False)
    assert len(hub.requests) == 2  # the HEAD and the CDN's GET, once
    x = images()
    expected, got = outputs(model, x), outputs(loaded, x)
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
    with torch.no_grad():
        assert torch.equal(backbone(x), model.backbone(x))
    assert snapshot_problems(tmp_path / "hf-cache") == []


def test_a_dead_hub_falls_back_to_a_url_mirror(hub, exported, tmp_path):
    _, _, folder = exported
    entry = published(hub, folder)
    dead = f"hf://{REPO}/model.safetensors@{OTHER_COMMIT}"
    with serving({"/w.safetensors": ("ok", folder.weights.read_bytes())}) as mirror:
        data = dict(entry.to_dict(), urls=[mirror.url("/w.safetensors"), dead])
        entry = ZooEntry.from_dict(data, require_https=False)
        path = download(entry, progress=False)
        assert mirror.requests == ["/w.safetensors"]
    assert hub.hub_requests()[0][1].endswith(f"/resolve/{OTHER_COMMIT}/model.safetensors")
    assert path.read_bytes() == folder.weights.read_bytes()


def test_wrong_hash_is_one_line_and_leaves_nothing_in_the_cache(hub, exported, tmp_path):
    _, _, folder = exported
    entry = published(hub, folder, sha256="0" * 64)
    with pytest.raises(ChecksumError) as info:
        download(entry, progress=False)
    message = str(info.value)
    assert "\n" not in message and "expected " + "0" * 64 in message
    assert f"hf://{REPO}" in message
    assert snapshot_files(tmp_path / "hf-cache") == []
    assert not any((tmp_path / "hf-cache").rglob("blobs/*"))


def test_missing_revision_is_one_line(hub, exported, tmp_path):
    _, _, folder = exported
    entry = published(hub, folder)
    data = dict(entry.to_dict(), urls=[f"hf://{REPO}/model.safetensors@{OTHER_COMMIT}"])
    with pytest.raises(DownloadError) as info:
        download(ZooEntry.from_dict(data), progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert f"revision {OTHER_COMMIT} not found in {REPO}" in message
    assert snapshot_files(tmp_path / "hf-cache") == []


def test_cut_transfer_is_one_line_and_leaves_nothing_in_the_cache(hub, exported, tmp_path):
    _, _, folder = exported
    entry = published(hub, folder)
    hub.cut.add(entry.sha256)
    with pytest.raises(DownloadError) as info:
        download(entry, progress=False)
    message = str(info.value)
    assert "\n" not in message and f"hf://{REPO}" in message
    assert "the transfer was cut or the host could not be reached" in message
    assert sum(1 for s, m, _ in hub.requests if s == "cdn" and m == "GET") >= 2  # resumes tried
    assert snapshot_files(tmp_path / "hf-cache") == []
    assert snapshot_problems(tmp_path / "hf-cache") == []


def test_offline_reads_the_cache_and_says_so_on_a_miss(hub, exported, tmp_path, monkeypatch):
    _, _, folder = exported
    entry = published(hub, folder)
    online = download(entry, progress=False)
    seen = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert download(entry, progress=False) == online  # cache hit
    assert len(hub.requests) == seen  # not a single request

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(DownloadError) as info:  # cache miss
        download(entry, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert "offline (HF_HUB_OFFLINE) and not in the Hugging Face cache" in message
    assert len(hub.requests) == seen
    assert snapshot_files(tmp_path / "empty-cache") == []


def test_a_corrupted_cached_file_is_fetched_again(hub, exported, tmp_path):
    _, _, folder = exported
    entry = published(hub, folder)
    path = download(entry, progress=False)
    blob = path.resolve()
    blob.write_bytes(b"not the weights")
    again = download(entry, progress=False)
    assert again.read_bytes() == folder.weights.read_bytes()
    assert snapshot_problems(tmp_path / "hf-cache") == []


def test_check_fetch_reports_each_entrys_live_sources(hub, exported, tmp_path, capsys):
    _, _, folder = exported
    entry = published(hub, folder)
    data = dict(entry.to_dict(), urls=[*entry.urls, "https://127.0.0.1:9/gone.safetensors"])
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"format": "solo-bayesncl-zoo-manifest/1", "models": [data]}))
    assert main(["check", str(manifest), "--fetch"]) == 1
    printed = capsys.readouterr()
    assert f"{entry.urls[0]} OK" in printed.out
    assert "bayesncl-toy: 1/2 source(s) live" in printed.out
    assert "gone.safetensors FAILED" in printed.err


# ---------------------------------------------------------------- a Hub too slow to wait for

TINY = bytes(range(250)) * 4  # a 1,000-byte file: its deadline is the timeout + 0.1 s


def listed_tiny(server: HubServer, tmp_path: Path, monkeypatch) -> ZooEntry:
    """A 1,000-byte file on the server, listed as ``test-ncl`` in the user's manifest."""
    sha = server.add(REPO, COMMIT, "w.bin", TINY)
    entry = make_entry([f"hf://{REPO}/w.bin@{COMMIT}"], sha256=sha, size=len(TINY))
    manifest = tmp_path / "mine.json"
    doc = {"format": "solo-bayesncl-zoo-manifest/1", "models": [entry.to_dict()]}
    manifest.write_text(json.dumps(doc))
    monkeypatch.setenv("SOLO_BAYESNCL_MANIFEST", str(manifest))
    return entry


def running_beside() -> tuple[set[int], set[int]]:
    """The threads (but the fake servers' own) and the child processes of this process."""
    threads = {
        t.ident or 0
        for t in threading.enumerate()
        if "process_request_thread" not in t.name  # a fake server's connection
    }
    children: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            children |= {int(pid) for pid in (task / "children").read_text().split()}
    return threads, children


def failed_in_one_line(capsys, caplog, argv: list[str]) -> str:
    """Run the CLI, which must fail (status 2); the one line it printed (and no warning logged,
    which a terminal would show too). Nothing the call started runs on once it has returned: no
    thread, no process (which could go on retrying, logging or writing)."""
    before = running_beside()
    with caplog.at_level(logging.WARNING):
        assert main(argv) == 2
    after = running_beside()
    assert (after[0] - before[0], after[1] - before[1]) == (set(), set())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err.rstrip("\n")


def nothing_cached(cache: Path) -> bool:
    return snapshot_files(cache) == [] and snapshot_problems(cache) == []


def test_a_hub_that_never_answers_the_metadata_request_is_given_up(
    hub, tmp_path, monkeypatch, capsys, caplog
):
    entry = listed_tiny(hub, tmp_path, monkeypatch)
    hub.silent = True
    err = failed_in_one_line(
        capsys, caplog, ["download", "test-ncl", "--no-progress", "--timeout", "1"]
    )
    host = hub.endpoint.removeprefix("http://")
    assert err == (
        f"error: could not download zoo entry 'test-ncl': {entry.urls[0]}: {host} did not "
        "answer the metadata request for w.bin within 1 s"
    )
    assert "cdn" not in {s for s, _, _ in hub.requests}  # never answered: no CDN request
    assert nothing_cached(tmp_path / "hf-cache")


def test_a_hub_trickling_the_file_is_given_up_at_its_deadline(
    hub, tmp_path, monkeypatch, capsys, caplog
):
    """A byte every 0.2 s never trips a read timeout: the transfer is cut at its deadline (the
    timeout plus the size at 10 KiB/s) and nothing, not even a temporary file, stays cached."""
    entry = listed_tiny(hub, tmp_path, monkeypatch)
    hub.trickle.add(entry.sha256)
    err = failed_in_one_line(  # 5 s for the first byte, on a busy machine too
        capsys, caplog, ["download", "test-ncl", "--no-progress", "--timeout", "5"]
    )
    host = hub.endpoint.removeprefix("http://")
    assert err == (
        f"error: could not download zoo entry 'test-ncl': {entry.urls[0]}: the transfer of w.bin "
        f"from the Hub at {host} did not end within its deadline of 5.1 s"
    )
    assert ("cdn", "GET", f"/blobs/{entry.sha256}") in hub.requests
    assert nothing_cached(tmp_path / "hf-cache")
    assert not list((tmp_path / "hf-cache").rglob("blobs/*"))


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (500, "HTTP 500 from {host} (Internal Server Error) for w.bin in " + REPO),
        (404, "HTTP 404 from {host}: no such file or revision (w.bin at " + COMMIT),
        (403, "HTTP 403 from {host} (Forbidden) for " + REPO + ": private or gated?"),
    ],
)
def test_a_hub_answering_an_error_status_is_one_line_with_the_status(
    status, says, hub, tmp_path, monkeypatch, capsys, caplog
):
    """The status the Hub gave, at once: asked once (no retries, so no "Retrying" lines), not
    hidden behind "cannot reach" or a deadline."""
    entry = listed_tiny(hub, tmp_path, monkeypatch)
    hub.status = status
    err = failed_in_one_line(capsys, caplog, ["download", "test-ncl", "--no-progress"])
    host = hub.endpoint.removeprefix("http://")
    prefix = f"error: could not download zoo entry 'test-ncl': {entry.urls[0]}: "
    assert err.startswith(prefix + says.format(host=host)), err
    assert "cannot reach" not in err and "within" not in err
    assert hub.hub_requests() == [("HEAD", f"/{REPO}/resolve/{COMMIT}/w.bin")]
    assert nothing_cached(tmp_path / "hf-cache")


def test_download_timeout_takes_any_number_of_seconds_above_zero(
    hub, tmp_path, monkeypatch, capsys
):
    listed_tiny(hub, tmp_path, monkeypatch)
    assert main(["download", "test-ncl", "--no-progress", "--timeout", "1e9"]) == 0
    assert capsys.readouterr().out.strip().endswith("w.bin")
    for bad in ("0", "-1", "nan", "inf", "1e", "ten"):
        with pytest.raises(SystemExit):
            main(["download", "test-ncl", "--timeout", bad])
        assert f"argument --timeout: {bad!r} is not a number of seconds > 0" in (
            capsys.readouterr().err
        )


def hub_folder(tmp_path: Path) -> Path:
    """A folder with the three files of a Hub folder (publish reads nothing else first)."""
    folder = tmp_path / "toy"
    folder.mkdir()
    for name in ("model.safetensors", "config.json", "README.md"):
        (folder / name).write_text("{}")
    return folder


def test_publish_to_a_hub_that_never_answers_is_given_up(
    hub, tmp_path, monkeypatch, capsys, caplog
):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    argv = ["publish", str(hub_folder(tmp_path)), "--repo", REPO, "--timeout", "1"]
    hub.silent = True
    err = failed_in_one_line(capsys, caplog, argv)
    host = hub.endpoint.removeprefix("http://")
    assert err == (
        f"error: upload to {REPO} failed: {host} did not answer the request to create the "
        "repository within 1 s"
    )


def test_publish_to_an_unreachable_hub_is_one_line(tmp_path, monkeypatch, capsys, caplog):
    with socket.socket() as closed:  # a port that nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    err = failed_in_one_line(capsys, caplog, ["publish", str(hub_folder(tmp_path)), "--repo", REPO])
    assert err.startswith(
        f"error: upload to {REPO} failed: could not connect to 127.0.0.1:{port} ("
    )
    assert "refused" in err.lower()


# ---------------------------------------------------------------- publish


def test_publish_without_a_token_refuses_in_one_line(hub, exported, capsys):
    _, _, folder = exported
    assert main(["publish", str(folder.folder), "--repo", REPO]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: no Hugging Face token found")
    assert "hf auth login" in err and "HF_TOKEN" in err
    assert hub.requests == []  # nothing sent


def test_publish_uploads_the_folder_and_prints_the_entry(hub, exported, tmp_path, monkeypatch):
    _, ckpt, _ = exported
    folder = export_hub_folder(ckpt, tmp_path / "toy")  # no --repo: the card has OWNER/NAME
    log = tmp_path / "calls.jsonl"  # the calls are made in child processes: recorded in a file

    def record(*call) -> None:
        with log.open("a") as out:
            out.write(json.dumps(call) + "\n")

    class FakeApi:
        def __init__(self, endpoint, token, library_name):
            record("init", endpoint, token)

        def create_repo(self, repo_id, **kwargs):
            record("create_repo", repo_id, kwargs["exist_ok"])

        def upload_folder(self, repo_id, folder_path, **kwargs):
            record("upload_folder", repo_id, sorted(kwargs["allow_patterns"]))
            assert REPO in Path(folder_path, "README.md").read_text()
            return type("CommitInfo", (), {"oid": COMMIT})()

    monkeypatch.setattr(publish_module, "HfApi", FakeApi)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    printed = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
    assert main(["publish", str(folder.folder), "--repo", REPO]) == 0
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        ["init", hub.endpoint, "hf_test"],
        ["create_repo", REPO, True],
        ["upload_folder", REPO, ["README.md", "config.json", "model.safetensors"]],
    ]
    entry = json.loads(printed[1])
    assert entry["urls"] == [f"hf://{REPO}/model.safetensors@{COMMIT}"]
    assert entry["sha256"] == folder.sha256 and entry["license"] == "mit"
    assert entry["name"] == "bayesncl-toy"
    ZooEntry.from_dict(entry)


def test_a_foreign_safetensors_file_is_refused_in_one_line(tmp_path):
    from safetensors.torch import save_file

    from solo_bayesncl.zoo import ArtifactError, is_artifact, open_artifact

    path = tmp_path / "other.safetensors"
    save_file({"w": torch.ones(2)}, str(path))
    assert not is_artifact(path)
    with pytest.raises(ArtifactError, match="safetensors.torch.load_file") as info:
        open_artifact(path)
    assert "\n" not in str(info.value)


def test_verify_reads_the_safetensors_form(exported, capsys):
    _, _, folder = exported
    assert main(["verify", str(folder.weights), "--sha256", folder.sha256]) == 0
    out = capsys.readouterr().out
    assert "method bayesncl, dtype float32" in out and "OK: sha256 matches" in out

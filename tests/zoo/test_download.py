"""Download safety of the model zoo against a loopback HTTP(S) server on 127.0.0.1.

The server serves one artifact under three behaviours (complete file, 404, truncated transfer:
a Content-Length larger than the bytes sent, then the connection is closed) and counts the
requests, so "cache hit without network" is asserted as "zero requests".
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import re
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from solo_bayesncl.zoo import (
    ChecksumError,
    DownloadError,
    UnknownModelError,
    ZooEntry,
    cached_path,
    download,
    list_models,
)

PAYLOAD = bytes(range(256)) * 1000  # 256,000 bytes: several chunks, a real progress bar
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


class LoopbackServer:
    """``http.server`` on 127.0.0.1, port 0, in a thread; routes map a path to a behaviour.

    Behaviours: ``("ok", bytes)``, ``("404", None)``, ``("truncated", bytes)`` (announces the
    full length, sends half, closes), ``("trickle", bytes)`` (announces the full length, sends a
    byte every 0.5 s). Every request's path is recorded in ``requests``.
    """

    def __init__(self, routes: dict[str, tuple[str, bytes | None]], tls_cert: Path | None = None):
        self.routes = routes
        self.requests: list[str] = []
        self.stopping = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                server.requests.append(self.path)
                kind, body = server.routes.get(self.path, ("404", None))
                if kind == "404":
                    self.send_error(404, "not found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if kind == "ok":
                    self.wfile.write(body)
                elif kind == "trickle":  # one byte every 0.5 s, until the client hangs up
                    for i in range(len(body)):
                        if server.stopping.wait(0.5):
                            return
                        try:
                            self.wfile.write(body[i : i + 1])
                            self.wfile.flush()
                        except OSError:
                            return
                else:  # truncated: half the announced bytes, then hang up
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls_cert is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls_cert)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        host, port = self.httpd.server_address[:2]
        self.base = f"{scheme}://{'localhost' if tls_cert else host}:{port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def close(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def serving(routes: dict[str, tuple[str, bytes | None]], **kwargs) -> Iterator[LoopbackServer]:
    server = LoopbackServer(routes, **kwargs)
    try:
        yield server
    finally:
        server.close()


def make_entry(urls: list[str], sha256: str = PAYLOAD_SHA, size: int = len(PAYLOAD)) -> ZooEntry:
    """A loopback entry (http allowed for 127.0.0.1 only through require_https=False)."""
    config = {"method": "ncl", "backbone": {"name": "resnet18"}, "data": {"dataset": "cifar10"}}
    return ZooEntry.from_dict(
        {
            "name": "test-ncl",
            "method": "ncl",
            "dataset": "cifar10",
            "backbone": "resnet18",
            "urls": urls,
            "sha256": sha256,
            "size": size,
            "config": config,
            "metrics": {"acc1": 1.0},
        },
        require_https=False,
    )


def all_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SOLO_BAYESNCL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SOLO_BAYESNCL_OFFLINE", raising=False)
    monkeypatch.delenv("SOLO_BAYESNCL_MANIFEST", raising=False)


def test_download_verifies_then_cache_hit_needs_no_request(tmp_path, capfd):
    with serving({"/a.pt": ("ok", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/a.pt")])
        path = download(entry)
        assert path.read_bytes() == PAYLOAD
        assert path.parent == tmp_path / "cache"  # from $SOLO_BAYESNCL_CACHE
        assert path == cached_path(entry)
        assert srv.requests == ["/a.pt"]
        assert "256k" in capfd.readouterr().err  # tqdm progress bar on stderr

        again = download(entry, progress=False)
        assert again == path
        assert srv.requests == ["/a.pt"]  # no second request


def test_offline_uses_verified_cache_and_refuses_network(monkeypatch):
    with serving({"/a.pt": ("ok", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/a.pt")])
        path = download(entry, progress=False)
    # server gone: only the cache can answer
    monkeypatch.setenv("SOLO_BAYESNCL_OFFLINE", "1")
    assert download(entry, progress=False) == path
    path.unlink()
    with pytest.raises(DownloadError, match="not in the cache"):
        download(entry, progress=False)


def test_wrong_hash_is_an_error_and_leaves_nothing(tmp_path):
    wrong = "0" * 64
    with serving({"/a.pt": ("ok", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/a.pt")], sha256=wrong)
        with pytest.raises(ChecksumError) as info:
            download(entry, progress=False)
    message = str(info.value)
    assert "test-ncl" in message and wrong in message and PAYLOAD_SHA in message
    assert (info.value.expected, info.value.actual) == (wrong, PAYLOAD_SHA)
    assert all_files(tmp_path / "cache") == []


def test_404_then_second_url(tmp_path):
    with serving({"/good.pt": ("ok", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/missing.pt"), srv.url("/good.pt")])
        path = download(entry, progress=False)
        assert srv.requests == ["/missing.pt", "/good.pt"]
    assert path.read_bytes() == PAYLOAD
    assert all_files(tmp_path / "cache") == [path]


def test_interrupted_transfer_leaves_no_complete_looking_file(tmp_path):
    with serving({"/cut.pt": ("truncated", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/cut.pt")])
        with pytest.raises(DownloadError) as info:
            download(entry, progress=False)
        assert srv.requests == ["/cut.pt"]
    assert srv.url("/cut.pt") in str(info.value)
    assert not cached_path(entry).exists()
    assert all_files(tmp_path / "cache") == []  # no .part left either


def test_interrupted_transfer_falls_back_to_mirror():
    with serving({"/cut.pt": ("truncated", PAYLOAD), "/ok.pt": ("ok", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/cut.pt"), srv.url("/ok.pt")])
        path = download(entry, progress=False)
        assert srv.requests == ["/cut.pt", "/ok.pt"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PAYLOAD_SHA


def test_every_url_failing_names_each_url():
    with serving({}) as srv:
        urls = [srv.url("/x.pt"), srv.url("/y.pt")]
        with pytest.raises(DownloadError) as info:
            download(make_entry(urls), progress=False)
    assert [u for u, _ in info.value.failures] == urls
    assert "404" in str(info.value)


def test_tampered_cache_file_is_replaced(tmp_path):
    with serving({"/a.pt": ("ok", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/a.pt")])
        target = cached_path(entry)
        target.parent.mkdir(parents=True)
        target.write_bytes(b"x" * len(PAYLOAD))  # same size, other bytes
        assert download(entry, progress=False).read_bytes() == PAYLOAD
        assert srv.requests == ["/a.pt"]


def test_unknown_name_lists_available(monkeypatch):
    with pytest.raises(UnknownModelError, match="no zoo entry named 'nope'"):
        download("nope")


def _self_signed_cert(folder: Path) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command for a self-signed loopback certificate")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost"],
        check=True,
        capture_output=True,
    )
    both = folder / "both.pem"
    both.write_text(cert.read_text() + key.read_text())
    return both


def test_download_by_name_from_user_manifest_over_https(tmp_path, monkeypatch, capsys):
    """A user's published manifest (https, as the schema demands) found by name."""
    pem = _self_signed_cert(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pem))
    with serving({"/m.pt": ("ok", PAYLOAD)}, tls_cert=pem) as srv:
        entry = make_entry([srv.url("/m.pt")]).to_dict()
        manifest = tmp_path / "mine.json"
        doc = {"format": "solo-bayesncl-zoo-manifest/1", "models": [entry]}
        manifest.write_text(json.dumps(doc))
        monkeypatch.setenv("SOLO_BAYESNCL_MANIFEST", str(manifest))
        assert "test-ncl" in [e.name for e in list_models()]
        path = download("test-ncl", progress=False)
        assert srv.requests == ["/m.pt"]
        from solo_bayesncl.cli.zoo import main

        assert main(["download", "test-ncl", "--no-progress"]) == 0  # cached: no request
        assert srv.requests == ["/m.pt"]
    assert capsys.readouterr().out.strip() == str(path)
    assert path.read_bytes() == PAYLOAD


def test_check_fetch_flags_a_url_that_does_not_hold_the_file(tmp_path, monkeypatch, capsys):
    """``check --fetch``: every URL of every entry must serve the exact bytes."""
    from solo_bayesncl.cli.zoo import main

    pem = _self_signed_cert(tmp_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pem))
    routes = {"/m.pt": ("ok", PAYLOAD), "/other.pt": ("ok", PAYLOAD[::-1])}
    with serving(routes, tls_cert=pem) as srv:
        manifest = tmp_path / "mine.json"

        def publish(*paths: str) -> None:
            entry = make_entry([srv.url(p) for p in paths]).to_dict()
            doc = {"format": "solo-bayesncl-zoo-manifest/1", "models": [entry]}
            manifest.write_text(json.dumps(doc))

        publish("/m.pt")
        assert main(["check", str(manifest), "--fetch"]) == 0
        assert f"{srv.url('/m.pt')} OK" in capsys.readouterr().out
        publish("/m.pt", "/gone.pt", "/other.pt")
        assert main(["check", str(manifest), "--fetch"]) == 1
        err = capsys.readouterr().err
        assert f"{srv.url('/gone.pt')} FAILED" in err and "404" in err
        assert f"{srv.url('/other.pt')} FAILED" in err and "sha256 mismatch" in err
    assert all_files(tmp_path / "cache") == []  # checks use a temporary cache


def test_interrupt_mid_transfer_removes_the_partial_file(tmp_path, monkeypatch):
    """Ctrl-C while bytes arrive: the exception propagates and no file is left behind."""
    from solo_bayesncl.zoo import fetch

    def half_then_interrupt(url, dest, progress, *limits):
        dest.write_bytes(PAYLOAD[:1000])
        raise KeyboardInterrupt

    monkeypatch.setattr(fetch, "_fetch_to", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        download(make_entry(["http://127.0.0.1:9/a.pt"]), progress=False)
    assert all_files(tmp_path / "cache") == []


def _dead_pid() -> int:
    """The id of a process that has exited."""
    import os

    pid = os.getpid() + 1
    while True:  # find an id with no process behind it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


def test_a_killed_download_leaves_no_part_file_forever(tmp_path):
    """A SIGKILL skips every ``finally``: the next download removes the stale ``.part`` files
    (process gone, or older than a day) and keeps the one of a live download."""
    import os
    import time

    with serving({"/a.pt": ("ok", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/a.pt")])
        target = cached_path(entry)
        target.parent.mkdir(parents=True)
        dead = target.parent / f".{target.name}.{_dead_pid()}.x1y2.part"
        old = target.parent / f".{target.name}.ab12cd.part"  # the former unnamed layout
        live = target.parent / f".{target.name}.{os.getpid()}.k3m4.part"
        for part in (dead, old, live):
            part.write_bytes(PAYLOAD[:100])
        two_days_ago = time.time() - 2 * 86400
        os.utime(old, (two_days_ago, two_days_ago))
        assert download(entry, progress=False).read_bytes() == PAYLOAD
    assert not dead.exists() and not old.exists()
    assert live.exists()  # another download in progress is left alone


def bytes_received(message: str) -> int:
    """The bytes a transfer cut at its deadline had received, as its message says."""
    (count,) = re.findall(r"\((\d+) bytes received\)", message)
    return int(count)


def test_a_trickling_server_is_given_up_at_the_overall_deadline(tmp_path, monkeypatch):
    """Mirrors that each send a byte now and then never trip the per-read timeout; the download
    as a whole ($SOLO_BAYESNCL_DOWNLOAD_DEADLINE, here 2 s) ends in one line, the next mirror
    is not started past it, and nothing is left in the cache."""
    monkeypatch.setenv("SOLO_BAYESNCL_DOWNLOAD_DEADLINE", "2")
    with serving({"/a.pt": ("trickle", PAYLOAD), "/b.pt": ("trickle", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/a.pt"), srv.url("/b.pt")])
        with pytest.raises(DownloadError) as info:
            download(entry, progress=False, timeout=5)
        assert srv.requests == ["/a.pt"]
    message = str(info.value)
    assert bytes_received(message) < len(PAYLOAD)  # cut at the deadline, not waited out
    assert "\n" not in message
    assert message.startswith(
        "could not download zoo entry 'test-ncl' within its overall deadline of 2 s "
        "(SOLO_BAYESNCL_DOWNLOAD_DEADLINE=2); nothing was kept; tried "
        f"{srv.url('/a.pt')}: "
    )
    assert message.endswith(
        "a larger SOLO_BAYESNCL_DOWNLOAD_DEADLINE gives a slow connection more time"
    )
    assert all_files(tmp_path / "cache") == []


def test_the_overall_deadline_is_also_a_parameter_and_is_checked(monkeypatch):
    from solo_bayesncl.zoo import ZooError

    with serving({"/a.pt": ("trickle", PAYLOAD)}) as srv:
        entry = make_entry([srv.url("/a.pt")])
        with pytest.raises(
            DownloadError, match=r"overall deadline of 1\.5 s \(total_deadline"
        ) as cut:
            download(entry, progress=False, timeout=5, total_deadline=1.5)
        assert bytes_received(str(cut.value)) < len(PAYLOAD)
        for bad in ("soon", "0", "-3", "nan"):
            monkeypatch.setenv("SOLO_BAYESNCL_DOWNLOAD_DEADLINE", bad)
            with pytest.raises(ZooError) as info:
                download(entry, progress=False)
            assert str(info.value) == (
                f"SOLO_BAYESNCL_DOWNLOAD_DEADLINE={bad!r} is not a number of seconds > 0 (the "
                "longest a zoo download may take, every mirror together)"
            )
        assert srv.requests == ["/a.pt"]  # a bad setting is refused before any request

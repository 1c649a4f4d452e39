"""Zoo sources on the Hugging Face Hub: ``hf://OWNER/REPO/FILE@REVISION``.

An ``hf://`` source names a file of a Hub model repository at a pinned commit (which
:func:`publish_folder` prints). :func:`huggingface_hub.hf_hub_download` fetches it into the
Hugging Face cache with the user's token, honouring ``$HF_HUB_OFFLINE``; ``$HF_ENDPOINT``,
``$HF_HUB_OFFLINE`` and ``$HF_HUB_CACHE`` are read at each download, not only at import. Bytes
that fail the entry's sha256 are removed from the cache (the snapshot link and its blob).

Every Hub call keeps the deadlines of an https mirror (:mod:`.fetch`): huggingface_hub bounds
each read but not a call (it retries metadata requests for minutes and reads 10 MiB chunks), so
each call runs in a forked child process killed at its deadline, with the temporary file of a
killed download removed. There huggingface_hub logs nothing, and a download stops at the first
error status, which the reason names (a 500 is not retried for minutes behind "cannot reach").
"""

from __future__ import annotations

import functools
import http
import logging
import math
import multiprocessing
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from huggingface_hub import constants, hf_hub_download, set_client_factory
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import _http as hub_http
from tqdm.auto import tqdm

from .hashing import sha256_file

HF_SCHEME = "hf://"
#: The weights file of a Hub folder written by ``zoo export --hub-folder``.
HUB_WEIGHTS = "model.safetensors"
#: The run's config in a Hub folder.
HUB_CONFIG = "config.json"
#: The model card of a Hub folder.
HUB_CARD = "README.md"
LOGIN_HINT = "log in with `hf auth login` or set HF_TOKEN"

_REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
REPO_RE = re.compile(rf"^{_REPO_PART}/{_REPO_PART}$")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class HubSource:
    """One file of a Hub model repository at a revision."""

    repo_id: str
    filename: str
    revision: str

    def __str__(self) -> str:
        return f"{HF_SCHEME}{self.repo_id}/{self.filename}@{self.revision}"


def is_hub_url(url: Any) -> bool:
    """True for an ``hf://`` source."""
    return isinstance(url, str) and url.startswith(HF_SCHEME)


def parse_hub_url(url: str) -> HubSource:
    """``hf://OWNER/REPO/FILE@REVISION`` as a :class:`HubSource` (``REVISION`` a 40-hex commit id:
    a branch moves, a pin does not); ValueError saying the expected form otherwise."""
    form = f"{HF_SCHEME}OWNER/REPO/FILE@REVISION (REVISION a 40-hex commit id)"
    if not is_hub_url(url):
        raise ValueError(f"{url!r} is not a Hub source {form}")
    path, at, revision = url[len(HF_SCHEME) :].rpartition("@")
    parts = path.split("/")
    if not at or len(parts) < 3 or not all(parts):
        raise ValueError(f"{url!r} is not a Hub source {form}")
    repo_id, filename = "/".join(parts[:2]), "/".join(parts[2:])
    if not REPO_RE.match(repo_id) or ".." in parts:
        raise ValueError(f"{url!r}: {repo_id!r} is not a Hub repository id OWNER/NAME")
    if not _COMMIT_RE.match(revision):
        raise ValueError(
            f"{url!r}: revision {revision!r} is not a commit id (40 lowercase hex digits); "
            "pin the commit that `zoo publish` printed, not a branch"
        )
    return HubSource(repo_id, filename, revision)


def hub_url(repo_id: str, filename: str, revision: str) -> str:
    """The ``hf://`` source of ``filename`` in ``repo_id`` at ``revision`` (validated)."""
    return str(parse_hub_url(f"{HF_SCHEME}{repo_id}/{filename}@{revision}"))


def hub_endpoint() -> str:
    """The Hub to talk to: ``$HF_ENDPOINT`` now, else huggingface_hub's (https://huggingface.co)."""
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    """True when ``$HF_HUB_OFFLINE`` is set now (or was when huggingface_hub was imported)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE or bool(
        constants.HF_HUB_OFFLINE
    )


def hub_cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The Hugging Face cache: ``path``, else ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else the
    one huggingface_hub found at import."""
    if path is not None:
        return Path(path).expanduser()
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def hub_host(endpoint: str) -> str:
    """The host (and port) of a Hub endpoint, as messages name it: ``huggingface.co``."""
    return urlsplit(endpoint).netloc or endpoint


class HubTimeout(TimeoutError):
    """A Hub call abandoned at its deadline; the message says which host and what timed out."""


class HubCallError(Exception):
    """A Hub call that failed in its process; the message is one line saying why."""


class HubStatusError(Exception):
    """An error status answered to a download's request (raised as the answer comes, so
    huggingface_hub neither retries nor turns it into "cannot reach")."""

    def __init__(self, status: int, url: str, code: str | None) -> None:
        super().__init__(f"HTTP {status} for {url}")
        self.status, self.host, self.code = status, urlsplit(url).netloc, code


def _raise_error_status(response: Any) -> None:
    """An httpx response hook: :class:`HubStatusError` for a status of 400 or more."""
    if response.status_code >= 400:
        code = response.headers.get("X-Error-Code")
        raise HubStatusError(response.status_code, str(response.request.url), code)


def _stop_at_error_statuses() -> None:
    """In a download's process: every client huggingface_hub makes raises at an error status
    (wrapping the factory in effect; huggingface_hub has no public getter for it)."""
    made_by = getattr(hub_http, "_GLOBAL_CLIENT_FACTORY", None)
    if made_by is None:  # another huggingface_hub: its own handling of statuses
        return

    def client() -> Any:
        made = made_by()
        made.event_hooks["response"].append(_raise_error_status)
        return made

    set_client_factory(client)


_LONGEST_WAIT = 86400.0
#: Seconds a Hub call's process may take to start (local work, not counted in its deadlines).
_START_LIMIT = 300.0


@functools.cache
def _fork() -> Any:
    """The ``fork`` start method: the child runs the caller's closures with its settings (POSIX;
    asked for at the first call, so that importing the zoo works everywhere)."""
    return multiprocessing.get_context("fork")


def _serve(call: Callable[[], Any], explain: Callable[[BaseException], str], answer: Any) -> None:
    """The child process of :class:`_Transfer`: sends ``call()``'s value or error on ``answer``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the caller, which kills us
    logging.disable(logging.CRITICAL)  # the caller reports, in one line
    answer.send(("started", None))
    try:
        message: tuple[str, Any] = ("ok", call())
    except BaseException as err:
        try:
            message = ("failed", explain(err))
        except Exception:  # an explanation must not hide the error
            message = ("failed", f"{type(err).__name__}: {err}")
    answer.send(message)


class _Transfer:
    """``call()`` in a forked child process, which :meth:`stop` kills (a thread cannot be killed).
    Made once the process runs, so a deadline counts the host's time, not the process start."""

    def __init__(self, call: Callable[[], Any], explain: Callable[[BaseException], str]) -> None:
        self._answer, sender = _fork().Pipe(duplex=False)
        self._process = _fork().Process(
            target=_serve, args=(call, explain, sender), name="solo-bayesncl-hub", daemon=True
        )
        self._process.start()
        sender.close()
        try:
            if not self.ended_by(time.monotonic() + _START_LIMIT):
                raise HubCallError(
                    f"the Hub call's process did not start within {_START_LIMIT:g} s"
                )
            self.value()  # "started", or what its end says
        except BaseException:
            self.stop()
            raise

    def ended_by(self, end: float) -> bool:
        """Wait until the call answers (or its process dies) or ``end`` (monotonic time)."""
        while True:  # in steps: poll() refuses a wait of more than about 24 days
            left = end - time.monotonic()
            if self._answer.poll(min(max(0.0, left), _LONGEST_WAIT)):
                return True
            if left <= _LONGEST_WAIT:
                return False

    def value(self) -> Any:
        """What the call returned; :class:`HubCallError` saying why it failed."""
        try:
            kind, value = self._answer.recv()
        except EOFError:
            self._process.join()
            raise HubCallError(
                f"the Hub call's process ended without an answer (exit status "
                f"{self._process.exitcode})"
            ) from None
        if kind == "failed":
            raise HubCallError(value)
        return value  # "started": None

    def stop(self) -> None:
        """Kill the process (it has answered, or is given up) and reap it."""
        self._process.kill()
        self._process.join()
        self._answer.close()


_T = TypeVar("_T")


def call_within(
    call: Callable[[], _T], seconds: float, what: str, explain: Callable[[BaseException], str]
) -> _T:
    """``call()`` in a child process (its value must pickle), ended within ``seconds``: its
    value, :class:`HubCallError` with ``explain`` of what it raised, else :class:`HubTimeout`
    ``"{what} within {seconds} s"`` (the process killed)."""
    transfer = _Transfer(call, explain)
    try:
        if transfer.ended_by(time.monotonic() + seconds):
            return transfer.value()
    finally:
        transfer.stop()
    raise HubTimeout(f"{what} within {_seconds(seconds)} s")


def _seconds(value: float) -> str:
    """A deadline in messages, up to the next tenth (60 s never reads 59.9)."""
    return f"{math.ceil(round(value * 10, 6)) / 10:g}"


def _answer_bar(answered: Any, progress: bool) -> type[tqdm]:
    """A tqdm class for huggingface_hub's transfer that sets ``answered`` (an event shared with
    the caller) when made, i.e. when the file's host has answered."""

    class AnswerBar(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = not progress
            super().__init__(*args, **kwargs)
            answered.set()

    return AnswerBar


def _download_within(
    call: Callable[[Any], str],
    explain: Callable[[BaseException], str],
    timeout: float,
    deadline: float,
    name: str,
    storage: Path,
    endpoint: str,
) -> str:
    """``call(answered)`` (``hf_hub_download`` of ``name`` into ``storage``) in a child process,
    the first byte within ``timeout`` seconds and the whole call within ``deadline`` from its
    start; :class:`HubCallError` or :class:`HubTimeout`, leaving no temporary file."""
    answered, host = _fork().Event(), hub_host(endpoint)
    blobs = storage / "blobs"
    before = set(blobs.glob("*.incomplete"))
    transfer = _Transfer(functools.partial(call, answered), explain)
    first_wait = min(timeout, deadline)
    start = time.monotonic()
    first, end = start + first_wait, start + deadline
    path, partial = None, set()
    try:
        if transfer.ended_by(first) or (answered.is_set() and transfer.ended_by(end)):
            path = transfer.value()
            return path
    finally:
        transfer.stop()
        if path is None:  # failed, killed at a deadline or by Ctrl-C: no bytes reach the cache
            partial = set(blobs.glob("*.incomplete")) - before
            for leftover in partial:
                leftover.unlink(missing_ok=True)
    if answered.is_set():
        what = f"the transfer of {name} from the Hub at {host} did not end within its deadline"
        raise HubTimeout(f"{what} of {_seconds(deadline)} s")
    if partial:  # the metadata came, the file's host (the Hub or its CDN) did not answer
        raise HubTimeout(
            f"{host} (or the host it sent the download to) did not start sending {name} within "
            f"{_seconds(first_wait)} s"
        )
    raise HubTimeout(
        f"{host} did not answer the metadata request for {name} within {_seconds(first_wait)} s"
    )


def discard_cached(path: Path) -> None:
    """Remove a file of the Hugging Face cache: its snapshot link and the blob it points to."""
    blob = path.resolve() if path.is_symlink() else None
    path.unlink(missing_ok=True)
    if blob is not None:
        blob.unlink(missing_ok=True)


def _status_reason(err: HubStatusError, source: HubSource, endpoint: str) -> str:
    """One line naming the status a host answered to a download, and what it means."""
    repo, rev, name = source.repo_id, source.revision, source.filename
    head = f"HTTP {err.status} from {err.host}"
    if err.code == "RevisionNotFound":
        return f"{head}: revision {rev} not found in {repo} on {endpoint}"
    if err.code == "EntryNotFound":
        return f"{head}: {name} not found in {repo} at revision {rev}"
    if err.code == "GatedRepo":
        return f"{head}: {repo} is gated: accept its terms on the Hub, then {LOGIN_HINT}"
    if err.code == "RepoNotFound":
        return f"{head}: repository {repo} not found on {endpoint} (or private: {LOGIN_HINT})"
    if err.status == 404:
        return f"{head}: no such file or revision ({name} at {rev} in {repo})"
    if err.status in (401, 403):
        phrase = http.HTTPStatus(err.status).phrase
        return f"{head} ({phrase}) for {repo}: private or gated? {LOGIN_HINT}"
    try:
        phrase = http.HTTPStatus(err.status).phrase
    except ValueError:
        return f"{head} for {name} in {repo}"
    return f"{head} ({phrase}) for {name} in {repo}"


def _reason(
    err: BaseException, source: HubSource, endpoint: str, offline: bool, cache: Path
) -> str:
    """One line saying why ``source`` gave no file."""
    repo, rev = source.repo_id, source.revision
    if isinstance(err, HubStatusError):
        return _status_reason(err, source, endpoint)
    if isinstance(err, RevisionNotFoundError):
        return f"revision {rev} not found in {repo} on {endpoint}"
    if isinstance(err, GatedRepoError):
        return f"{repo} on {endpoint} is gated: accept its terms on the Hub, then {LOGIN_HINT}"
    if isinstance(err, RepositoryNotFoundError):
        return f"repository {repo} not found on {endpoint} (or private: {LOGIN_HINT})"
    if isinstance(err, LocalEntryNotFoundError):
        if offline:
            return f"offline (HF_HUB_OFFLINE) and not in the Hugging Face cache {cache}"
        return f"cannot reach {endpoint} and not in the Hugging Face cache {cache}"
    if isinstance(err, EntryNotFoundError):
        return f"{source.filename} not found in {repo} at revision {rev}"
    if isinstance(err, HfHubHTTPError) and err.response is not None:
        return f"HTTP {err.response.status_code} from {endpoint} for {repo}"
    return hub_problem(err, hub_host(endpoint))


def hub_problem(err: BaseException, host: str) -> str:
    """One line saying what went wrong in a call to the Hub at ``host``."""
    lines = str(err).strip().splitlines()
    first = lines[0] if lines else ""
    if isinstance(err, HubTimeout | HubCallError | HfHubHTTPError):
        return first
    detail = f"{type(err).__name__}: {first}".rstrip(": ")
    if type(err).__module__.split(".")[0].startswith(("httpx", "httpcore")):
        if type(err).__name__ == "ConnectError":
            return f"could not connect to {host} ({first or 'refused'})"
        return f"the transfer was cut or the host could not be reached ({detail})"
    return detail


def fetch_hub_source(
    url: str,
    sha256: str,
    *,
    cache: str | os.PathLike[str] | None = None,
    offline: bool = False,
    progress: bool = True,
    timeout: float = 60.0,
    deadline: float = 3600.0,
) -> tuple[Path | None, str | None, str | None]:
    """Fetch one ``hf://`` source and check it against ``sha256``: ``(path, None, None)`` for a
    verified file, else ``(None, reason, actual)``, ``actual`` the sha256 of complete but wrong
    bytes (removed from the cache); ``timeout`` bounds the first byte, ``deadline`` the call."""
    source = parse_hub_url(url)
    endpoint, folder = hub_endpoint(), hub_cache_dir(cache)
    end = time.monotonic() + deadline
    storage = folder / repo_folder_name(repo_id=source.repo_id, repo_type="model")
    cached = (storage / "snapshots" / source.revision / source.filename).exists()
    tries = 2 if cached and not offline else 1  # a cached file failing its hash: fetch again

    def call(answered: Any) -> str:  # in the child process
        _stop_at_error_statuses()
        return hf_hub_download(
            source.repo_id,
            source.filename,
            revision=source.revision,
            cache_dir=folder,
            endpoint=endpoint,
            local_files_only=offline,
            etag_timeout=max(1.0, timeout),
            tqdm_class=_answer_bar(answered, progress),
            library_name="solo-bayesncl",
        )

    def explain(err: BaseException) -> str:  # in the child process
        return _reason(err, source, endpoint, offline, folder)

    for attempt in range(tries):
        left = deadline if attempt == 0 else max(0.0, end - time.monotonic())
        try:
            path = Path(
                _download_within(call, explain, timeout, left, source.filename, storage, endpoint)
            )
        except Exception as err:  # the call's own reason, a deadline, no fork: one line
            return None, _reason(err, source, endpoint, offline, folder), None
        actual = sha256_file(path)
        if actual == sha256:
            return path, None, None
        discard_cached(path)
        if attempt + 1 == tries:
            return None, f"sha256 mismatch: expected {sha256}, got {actual}", actual
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = [
    "HUB_CARD",
    "HUB_CONFIG",
    "HUB_WEIGHTS",
    "HubSource",
    "call_within",
    "fetch_hub_source",
    "hub_endpoint",
    "hub_host",
    "hub_offline",
    "hub_problem",
    "hub_url",
    "is_hub_url",
    "parse_hub_url",
]

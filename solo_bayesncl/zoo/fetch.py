"""Download a zoo entry by name: verified, cached, with mirrors on the Hub and on plain URLs.

An entry's sources (its ``urls``) are ``hf://OWNER/REPO/FILE@REVISION`` Hub files, fetched by
:mod:`.hub` into the Hugging Face cache, and HTTP(S)/FTP/SFTP/DOI URLs, fetched here into
``$SOLO_BAYESNCL_CACHE`` (default ``~/.cache/solo-bayesncl``). Hub sources are tried first, then
the URLs, each group in its listed order, until one gives the entry's bytes.

The safety policy (details in :func:`download`): a verified cached file needs no network; bytes go
to a ``.part`` file, are checked (size, then sha256) and only then renamed to the final name, so a
file under its final name is always complete and verified; an HTTP(S) transfer is abandoned when
no byte comes for ``timeout`` seconds or it outlasts its deadline (``timeout`` plus the size at
:data:`MIN_RATE`: a server trickling a byte now and then never trips a read timeout); the whole
download has an overall deadline (:func:`overall_deadline`), past which
:class:`~.errors.DownloadDeadlineError` says so in one line; offline, only the caches are read.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import pooch
import requests
from tqdm.auto import tqdm

from solo_bayesncl.io.files import remove_stale_temporaries, replacing

from .errors import ChecksumError, DownloadDeadlineError, DownloadError, ZooError
from .hashing import CHUNK, sha256_file
from .hub import fetch_hub_source, hub_offline, is_hub_url
from .manifest import ZooEntry, find_entry

log = logging.getLogger(__name__)

#: Seconds without data before a transfer is abandoned (and the next URL tried).
DEFAULT_TIMEOUT = 60
#: Slowest average transfer rate (bytes/s) a download may have before it is abandoned.
MIN_RATE = 10 * 1024

#: Seconds a whole download (every URL of the entry) may take, by default: an hour.
DEFAULT_TOTAL_DEADLINE = 3600.0

CACHE_ENV = "SOLO_BAYESNCL_CACHE"
OFFLINE_ENV = "SOLO_BAYESNCL_OFFLINE"
#: Environment variable overriding the overall deadline of a download, in seconds.
DEADLINE_ENV = "SOLO_BAYESNCL_DOWNLOAD_DEADLINE"


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``path`` if given, else ``$SOLO_BAYESNCL_CACHE``, else the default."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/solo-bayesncl").expanduser()


def is_offline() -> bool:
    """True when ``$SOLO_BAYESNCL_OFFLINE`` is set to 1/true/yes, or huggingface_hub's
    ``$HF_HUB_OFFLINE``: never touch the network, read the caches only."""
    own = os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes")
    return own or hub_offline()


def ordered_sources(urls: tuple[str, ...] | list[str]) -> list[str]:
    """The sources in the order tried: ``hf://`` ones first, then the URLs, each as listed."""
    return [u for u in urls if is_hub_url(u)] + [u for u in urls if not is_hub_url(u)]


def cached_path(entry: ZooEntry, root: str | os.PathLike[str] | None = None) -> Path:
    """Final location of ``entry`` in the cache: ``<cache>/<name>-<sha256[:12]>-<file>`` (the
    hash prefix keeps two versions of one name apart)."""
    return cache_dir(root) / f"{entry.name}-{entry.sha256[:12]}-{entry.filename}"


def is_verified(path: Path, entry: ZooEntry) -> bool:
    """True when ``path`` exists with the entry's size and sha256."""
    return (
        path.is_file() and path.stat().st_size == entry.size and sha256_file(path) == entry.sha256
    )


def overall_deadline(total_deadline: float | None, url_deadline: float) -> tuple[float, str]:
    """Seconds a whole download may take and where that comes from: ``total_deadline``, else
    ``$SOLO_BAYESNCL_DOWNLOAD_DEADLINE``, else :data:`DEFAULT_TOTAL_DEADLINE` or ``url_deadline``
    when longer. :class:`~.errors.ZooError` for a value that is not a number of seconds > 0."""
    if total_deadline is not None:
        where, text = f"total_deadline={total_deadline:g}", total_deadline
    elif os.environ.get(DEADLINE_ENV, "").strip():
        text = os.environ[DEADLINE_ENV].strip()
        where = f"{DEADLINE_ENV}={text}"
    else:
        seconds = max(DEFAULT_TOTAL_DEADLINE, url_deadline)
        return seconds, f"the default; set {DEADLINE_ENV} to change it"
    try:
        seconds = float(text)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        name = DEADLINE_ENV if total_deadline is None else "total_deadline"
        raise ZooError(
            f"{name}={text!r} is not a number of seconds > 0 (the longest a zoo download may "
            "take, every mirror together)"
        )
    return seconds, where


def _http_fetch(url: str, dest: Path, progress: bool, timeout: float, deadline: float) -> None:
    """``url`` into ``dest`` with requests (pooch's HTTP client), reading whatever has arrived
    (``read1``) so that the deadline is checked at least every ``timeout`` seconds."""
    start = time.monotonic()
    with requests.get(url, stream=True, timeout=timeout) as response:
        response.raise_for_status()
        total = int(response.headers.get("content-length") or 0) or None
        bar = tqdm(total=total, unit="B", unit_scale=True, disable=not progress, leave=True)
        with bar, open(dest, "wb") as out:
            while chunk := response.raw.read1(CHUNK, decode_content=True):
                out.write(chunk)
                bar.update(len(chunk))
                if time.monotonic() - start > deadline:
                    raise TimeoutError(
                        f"the transfer took longer than its deadline of {deadline:g} s "
                        f"({out.tell()} bytes received)"
                    )


def _fetch_to(url: str, dest: Path, progress: bool, timeout: float, deadline: float) -> None:
    """HTTP(S) through :func:`_http_fetch`; FTP, SFTP and DOI through pooch's downloaders."""
    if url.startswith(("http://", "https://")):
        _http_fetch(url, dest, progress, timeout, deadline)
        return
    pooch.downloaders.choose_downloader(url, progressbar=progress)(url, str(dest), None)


def download(
    entry: str | ZooEntry,
    cache: str | os.PathLike[str] | None = None,
    progress: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
    deadline: float | None = None,
    total_deadline: float | None = None,
    hub_cache: str | os.PathLike[str] | None = None,
) -> Path:
    """Path of the verified artifact of ``entry`` (a name or a :class:`ZooEntry`).

    Args:
        cache: cache folder of URL downloads; default ``$SOLO_BAYESNCL_CACHE`` or
            ``~/.cache/solo-bayesncl``.
        progress: show a tqdm progress bar on stderr.
        timeout: seconds without data before a URL is given up.
        deadline: seconds a source's whole transfer may take; default
            ``timeout + size / MIN_RATE``.
        total_deadline: seconds the whole download may take (:func:`overall_deadline`).
        hub_cache: the Hugging Face cache for ``hf://`` sources; default huggingface_hub's.

    Raises:
        ChecksumError: a source's bytes have another sha256, and no other source served the
            right ones; nothing is left in either cache.
        DownloadError: every source failed, or offline and the file is in no cache (one line
            naming each source and why); :class:`~.errors.DownloadDeadlineError` past the
            overall deadline.
        ZooError: an overall deadline that is not a number of seconds > 0.
    """
    entry = find_entry(entry) if isinstance(entry, str) else entry
    target = cached_path(entry, cache)
    if target.exists():
        if is_verified(target, entry):
            log.info("zoo: using cached %s", target)
            return target
        log.warning("zoo: cached %s does not match its sha256; downloading it again", target)
        target.unlink()
    sources = ordered_sources(entry.urls)
    offline = is_offline()
    if offline and not any(is_hub_url(u) for u in sources):
        raise DownloadError(entry.name, [("(offline)", f"not in the cache at {target}")])

    if deadline is None:
        deadline = timeout + entry.size / MIN_RATE
    total, total_from = overall_deadline(total_deadline, deadline)
    end = time.monotonic() + total
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_temporaries(target, ".part"):
        log.info("zoo: removed %s, left by an interrupted download", stale)
    failures: list[tuple[str, str]] = []
    mismatches: list[tuple[str, str]] = []  # (url, actual sha256)
    for url in sources:
        left = end - time.monotonic()
        if left <= 0 and not offline:
            raise DownloadDeadlineError(entry.name, total, total_from, failures, DEADLINE_ENV)
        limits = (min(timeout, left), min(deadline, left))
        if is_hub_url(url):
            path, reason, actual = fetch_hub_source(
                url,
                entry.sha256,
                cache=hub_cache,
                offline=offline,
                progress=progress,
                timeout=limits[0],
                deadline=limits[1],
            )
            if path is not None:
                return path
            failure: tuple[str, str | None] | None = (str(reason), actual)
        elif offline:
            failure = (f"offline: not in the cache at {target}", None)
        else:
            failure = _try_url(entry, url, target, progress, limits)
            if failure is None:
                return target
        reason, actual = failure
        failures.append((url, reason))
        if actual is not None:
            mismatches.append((url, actual))
        if actual is None and not offline and time.monotonic() >= end:
            raise DownloadDeadlineError(entry.name, total, total_from, failures, DEADLINE_ENV)
        if url != sources[-1]:  # the error raised after the last one names every source
            log.warning("zoo: %s failed (%s); trying the next source", url, reason)
    if mismatches:
        url, actual = mismatches[0]
        raise ChecksumError(entry.name, entry.sha256, actual, url)
    raise DownloadError(entry.name, failures)


def _try_url(
    entry: ZooEntry, url: str, target: Path, progress: bool, limits: tuple[float, float]
) -> tuple[str, str | None] | None:
    """Fetch ``url`` into ``target`` through a temporary file within ``limits``; None on success,
    else ``(reason, actual_sha256)`` (the hash only for complete but wrong bytes)."""
    with replacing(target, ".part") as tmp:  # only verified bytes replace the target
        problem = _fetch_checked(entry, url, tmp, progress, limits)
        if problem is not None:
            tmp.unlink()
    return problem


def _fetch_checked(
    entry: ZooEntry, url: str, tmp: Path, progress: bool, limits: tuple[float, float]
) -> tuple[str, str | None] | None:
    """Fetch ``url`` into ``tmp`` within ``limits`` (``(timeout, deadline)``) and check its
    sha256; None when it holds the entry's bytes."""
    try:
        _fetch_to(url, tmp, progress, *limits)
    except Exception as err:  # requests, urllib3, ftplib...: any failure means "next URL"
        return f"{type(err).__name__}: {err}", None
    actual = sha256_file(tmp)
    if actual != entry.sha256:
        size = tmp.stat().st_size
        return (
            f"sha256 mismatch: expected {entry.sha256}, got {actual} "
            f"({size} bytes, expected {entry.size})",
            actual,
        )
    return None

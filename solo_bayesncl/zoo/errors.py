"""Exceptions raised by the model zoo (and :class:`~solo_bayesncl.io.artifact.ArtifactError`);
each names what it is about (the entry, the file, the URL).
"""

from __future__ import annotations

from solo_bayesncl.io.artifact import ArtifactError

__all__ = [
    "ArtifactError",
    "ChecksumError",
    "DownloadDeadlineError",
    "DownloadError",
    "ManifestError",
    "UnknownModelError",
    "ZooError",
]


class ZooError(Exception):
    """Base class of every model-zoo error."""


class ManifestError(ZooError, ValueError):
    """A manifest (or one of its entries) does not follow the schema."""


class UnknownModelError(ZooError, LookupError):
    """A model name that no manifest lists."""

    def __init__(self, name: str, available: list[str]):
        self.name = name
        self.available = available
        listed = ", ".join(available) if available else "none: the manifest is empty"
        super().__init__(f"no zoo entry named {name!r}; available: {listed}")

    def __str__(self) -> str:  # LookupError would otherwise quote the message
        return self.args[0]


class ChecksumError(ZooError, ValueError):
    """Downloaded (or cached) bytes whose sha256 differs from the manifest's."""

    def __init__(self, name: str, expected: str, actual: str, source: str):
        self.name = name
        self.expected = expected
        self.actual = actual
        self.source = source
        super().__init__(
            f"sha256 mismatch for zoo entry {name!r} from {source}: "
            f"expected {expected}, got {actual}; the file was discarded"
        )


class DownloadError(ZooError, OSError):
    """No source of an entry gave verified bytes; one line naming each source and why."""

    def __init__(self, name: str, failures: list[tuple[str, str]]):
        self.name = name
        self.failures = failures
        tried = "; ".join(f"{url}: {' '.join(reason.split())}" for url, reason in failures)
        super().__init__(f"could not download zoo entry {name!r}: {tried}")

    def __str__(self) -> str:
        return self.args[0]


class DownloadDeadlineError(DownloadError):
    """The download, every URL together, outlasted its overall deadline; one line naming the
    deadline, its ``source``, what each URL did and the ``setting`` that gives more time."""

    def __init__(
        self,
        name: str,
        deadline: float,
        source: str,
        failures: list[tuple[str, str]],
        setting: str,
    ):
        self.name = name
        self.failures = failures
        self.deadline = deadline
        tried = "; ".join(f"{url}: {' '.join(reason.split())}" for url, reason in failures)
        ZooError.__init__(
            self,
            f"could not download zoo entry {name!r} within its overall deadline of "
            f"{deadline:g} s ({source}); nothing was kept; tried {tried or 'no URL'}; a larger "
            f"{setting} gives a slow connection more time",
        )

"""``zoo publish``: upload a Hub folder to a Hugging Face model repository with the user's token,
and give the manifest entry that downloads its weights pinned to the uploaded commit.

Without a token nothing is sent. Each Hub call keeps a download's deadlines (:mod:`.fetch`):
``timeout`` seconds for the repository's creation, plus the folder's size at
:data:`~.fetch.MIN_RATE` for the upload; a failure is one line naming the host.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, get_token

from .card import REPO_PLACEHOLDER, read_front_matter
from .errors import ZooError
from .fetch import DEFAULT_TIMEOUT, MIN_RATE
from .hub import (
    HUB_CARD,
    HUB_CONFIG,
    HUB_WEIGHTS,
    LOGIN_HINT,
    REPO_RE,
    call_within,
    hub_endpoint,
    hub_host,
    hub_problem,
    hub_url,
)
from .hub_folder import hub_entry


class HubLoginError(ZooError):
    """Publishing needs a Hugging Face token and none was found."""


@dataclass(frozen=True)
class PublishResult:
    """What :func:`publish_folder` uploaded: the repository, the commit and the manifest entry."""

    repo_id: str
    revision: str
    url: str
    entry: dict[str, Any]


def require_token(token: str | None = None) -> str:
    """``token``, else the user's Hugging Face token; :class:`HubLoginError` when there is none."""
    token = token or get_token()
    if not token:
        raise HubLoginError(
            f"no Hugging Face token found: {LOGIN_HINT} (a token with write access), then run "
            "this again; nothing was uploaded"
        )
    return token


def check_hub_folder(folder: Path) -> None:
    """:class:`ZooError` naming what a folder lacks to be a Hub folder."""
    missing = [n for n in (HUB_WEIGHTS, HUB_CONFIG, HUB_CARD) if not (folder / n).is_file()]
    if missing:
        raise ZooError(
            f"{folder} is not a Hub folder (it lacks {', '.join(missing)}); write one with "
            "`python -m solo_bayesncl.zoo export CKPT --hub-folder DIR`"
        )


def publish_folder(
    folder: str | os.PathLike[str],
    repo_id: str,
    *,
    name: str | None = None,
    urls: Iterable[str] = (),
    token: str | None = None,
    private: bool = False,
    message: str | None = None,
    license: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> PublishResult:
    """Upload a Hub folder (``zoo export --hub-folder``) to the model repository ``repo_id``,
    creating it when missing, with the user's token; returns the commit and the manifest entry
    whose first source is the weights at that commit, then ``urls``. :class:`HubLoginError`
    without a token, :class:`ZooError` for a bad folder or repository id (both before any
    network request) or a Hub that fails or outlasts ``timeout``."""
    folder = Path(folder)
    check_hub_folder(folder)
    if not REPO_RE.match(repo_id):
        raise ZooError(f"repository {repo_id!r} is not a Hub repository id OWNER/NAME")
    token = require_token(token)
    card = folder / HUB_CARD
    text = card.read_text(encoding="utf-8")
    if REPO_PLACEHOLDER in text:
        card.write_text(text.replace(REPO_PLACEHOLDER, repo_id), encoding="utf-8")
    endpoint = hub_endpoint()
    api = HfApi(endpoint=endpoint, token=token, library_name="solo-bayesncl")
    host = hub_host(endpoint)
    size = sum((folder / n).stat().st_size for n in (HUB_WEIGHTS, HUB_CONFIG, HUB_CARD))

    def create() -> None:  # in a child process: its value must pickle
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)

    def upload() -> str:
        return str(
            api.upload_folder(
                repo_id=repo_id,
                folder_path=str(folder),
                repo_type="model",
                commit_message=message or f"Upload {folder.name} with solo-bayesncl",
                allow_patterns=[HUB_WEIGHTS, HUB_CONFIG, HUB_CARD],
            ).oid
        )

    explain = functools.partial(hub_problem, host=host)
    try:
        what = f"{host} did not answer the request to create the repository"
        call_within(create, timeout, what, explain)
        what = f"the upload to {host} did not end"
        revision = call_within(upload, timeout + size / MIN_RATE, what, explain)
    except Exception as err:  # httpx, huggingface_hub, a deadline: one line naming the host
        raise ZooError(f"upload to {repo_id} failed: {hub_problem(err, host)}") from None
    license = license or read_front_matter(card.read_text(encoding="utf-8")).get("license")
    url = hub_url(repo_id, HUB_WEIGHTS, revision)
    entry = hub_entry(
        folder / HUB_WEIGHTS, [url, *urls], name or repo_id.split("/")[1], license=license
    )
    return PublishResult(repo_id, revision, url, entry)

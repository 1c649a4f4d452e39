"""Model zoo: list, download, verify, load and publish pretrained checkpoints.

Python API::

    from solo_bayesncl import zoo
    zoo.list_models()                                 # entries of the manifest(s)
    path = zoo.download("NAME")                       # verified file in the cache
    model = zoo.load_model("NAME", device="cuda")     # solo-learn method, eval mode
    backbone = zoo.load_model("NAME", as_="backbone") # bare backbone
    zoo.export_checkpoint("run.ckpt", name="my-model", fp16=True, urls=["https://..."])
    zoo.export_hub_folder("run.ckpt", "my-model")     # safetensors, config, model card
    zoo.publish_folder("my-model", "OWNER/NAME")       # upload; gives the manifest entry

Entry sources are ``hf://OWNER/REPO/FILE@COMMIT`` (Hugging Face Hub) and https URLs.
Command line: ``python -m solo_bayesncl.zoo {list,download,export,publish,verify,check}``.
Environment: ``SOLO_BAYESNCL_CACHE`` (cache folder of URL downloads), ``SOLO_BAYESNCL_MANIFEST``
(extra manifests, ``os.pathsep``-separated), ``SOLO_BAYESNCL_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``
(never use the network); huggingface_hub's ``HF_ENDPOINT``, ``HF_HUB_CACHE``, ``HF_TOKEN``.
"""

from __future__ import annotations

from solo_bayesncl.io.artifact import (
    ARTIFACT_FORMAT,
    Artifact,
    is_artifact,
    open_artifact,
    read_artifact,
)

from .errors import (
    ArtifactError,
    ChecksumError,
    DownloadError,
    ManifestError,
    UnknownModelError,
    ZooError,
)
from .export import ExportResult, export_checkpoint, export_state_dict
from .fetch import cache_dir, cached_path, download, sha256_file
from .hub import HubSource, is_hub_url, parse_hub_url
from .hub_folder import HubFolder, export_hub_folder, hub_entry
from .load import load_artifact, load_model
from .manifest import (
    MANIFEST_FORMAT,
    ZOO_METHODS,
    ZooEntry,
    find_entry,
    load_manifests,
    read_manifest,
    validate_entry,
)
from .publish import HubLoginError, PublishResult, publish_folder


def list_models() -> list[ZooEntry]:
    """Every entry of the project's manifest and of ``$SOLO_BAYESNCL_MANIFEST``'s files."""
    return load_manifests()


__all__ = [
    "ARTIFACT_FORMAT",
    "MANIFEST_FORMAT",
    "ZOO_METHODS",
    "Artifact",
    "ArtifactError",
    "ChecksumError",
    "DownloadError",
    "ExportResult",
    "HubFolder",
    "HubLoginError",
    "HubSource",
    "ManifestError",
    "PublishResult",
    "UnknownModelError",
    "ZooEntry",
    "ZooError",
    "cache_dir",
    "cached_path",
    "download",
    "export_checkpoint",
    "export_hub_folder",
    "export_state_dict",
    "find_entry",
    "hub_entry",
    "is_artifact",
    "is_hub_url",
    "list_models",
    "load_artifact",
    "load_manifests",
    "load_model",
    "open_artifact",
    "parse_hub_url",
    "publish_folder",
    "read_artifact",
    "read_manifest",
    "sha256_file",
    "validate_entry",
]

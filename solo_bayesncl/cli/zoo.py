"""``python -m solo_bayesncl.zoo``: list, download, export, publish, verify and check zoo weights,
and describe the manifest's fields."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from solo_bayesncl.cli.invocation import command_name, error_status
from solo_bayesncl.io.artifact import ArtifactError, open_artifact
from solo_bayesncl.zoo.errors import ZooError
from solo_bayesncl.zoo.export import export_checkpoint
from solo_bayesncl.zoo.fetch import DEFAULT_TIMEOUT, download, ordered_sources, sha256_file
from solo_bayesncl.zoo.hub_folder import export_hub_folder
from solo_bayesncl.zoo.manifest import (
    FIELD_DOCS,
    find_entry,
    load_manifests,
    manifest_paths,
    read_manifest,
)
from solo_bayesncl.zoo.publish import publish_folder

EMPTY_MANIFEST_HELP = (
    "Export your own run (python -m solo_bayesncl.zoo export RUN.ckpt --name NAME, or "
    "--hub-folder DIR and `publish` it on the Hugging Face Hub), or convert "
    "the official NCL checkpoints (github.com/PKU-ML/non_neg, 'Pretrained Checkpoints') the "
    "same way: see docs/zoo.md."
)


def _cmd_list(args: argparse.Namespace) -> int:
    entries = load_manifests()
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
        return 0
    if not entries:
        where = ", ".join(str(p) for p in manifest_paths())
        print(f"No published weights yet (manifest: {where}).")
        print(EMPTY_MANIFEST_HELP)
        return 0
    print(f"{'name':32} {'method':11} {'dataset':14} {'backbone':10} {'MB':>7}  metrics")
    for e in entries:
        metrics = ", ".join(f"{k}={v:g}" for k, v in e.metrics.items()) or "-"
        size = e.size / 2**20
        print(f"{e.name:32} {e.method:11} {e.dataset:14} {e.backbone:10} {size:7.1f}  {metrics}")
    return 0


def _cmd_fields(args: argparse.Namespace) -> int:
    width = max(map(len, FIELD_DOCS))
    for name, doc in FIELD_DOCS.items():
        print(f"{name:{width}}  {doc}")
    return 0


def _cmd_download(args: argparse.Namespace) -> int:
    path = download(
        args.name, cache=args.cache, progress=not args.no_progress, timeout=args.timeout
    )
    print(path)
    return 0


def _export_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options both forms of ``export`` take."""
    keys = ("name", "fp16", "metrics", "keep_momentum", "description", "overwrite")
    return {key: getattr(args, key) for key in keys}


def _cmd_export(args: argparse.Namespace) -> int:
    if args.hub_folder:
        return _export_hub(args)
    result = export_checkpoint(args.ckpt, out_dir=args.out, urls=args.url, **_export_options(args))
    print(f"artifact  {result.path}  ({result.size} bytes)")
    print(f"sha256    {result.sha256}  ({result.sha256_path})")
    print(f"entry     {result.entry_path}")
    print(json.dumps(result.entry, indent=2))
    print(
        f"next: upload {result.path.name} to each URL"
        + (" (none given: add them to the entry's 'urls')" if not result.entry["urls"] else "")
        + ", then add the entry to a manifest's 'models' and run "
        "`python -m solo_bayesncl.zoo check MANIFEST --fetch`.",
        file=sys.stderr,
    )
    return 0


def _export_hub(args: argparse.Namespace) -> int:
    result = export_hub_folder(
        args.ckpt,
        args.hub_folder,
        license=args.license,
        base_model=args.base_model,
        repo_id=args.repo,
        **_export_options(args),
    )
    print(f"weights   {result.weights}  ({result.size} bytes, sha256 {result.sha256})")
    print(f"config    {result.config}")
    print(f"card      {result.card}")
    print(
        f"next: python -m solo_bayesncl.zoo publish {result.folder} --repo "
        f"{args.repo or 'OWNER/NAME'}  (uploads it and prints the manifest entry)",
        file=sys.stderr,
    )
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    result = publish_folder(
        args.folder,
        args.repo,
        name=args.name,
        urls=args.url,
        private=args.private,
        message=args.message,
        timeout=args.timeout,
    )
    print(f"uploaded  {args.folder} to {args.repo} at commit {result.revision}")
    print(json.dumps(result.entry, indent=2))
    print(
        "next: add this entry to a manifest's 'models' (or a file named in "
        "SOLO_BAYESNCL_MANIFEST) and run `python -m solo_bayesncl.zoo check MANIFEST --fetch`.",
        file=sys.stderr,
    )
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    path = Path(args.file)
    actual = sha256_file(path)
    size = path.stat().st_size
    art = open_artifact(path, restore=False)
    print(f"{path}: sha256 {actual}, {size} bytes, method {art.method}, dtype {art.dtype}")
    expected = args.sha256
    if expected is None and args.name is not None:
        expected = find_entry(args.name).sha256
    if expected is None:
        match = [e.name for e in load_manifests() if e.sha256 == actual]
        print(f"manifest entries with this hash: {', '.join(match) or 'none'}")
        return 0
    if expected.lower() != actual:
        print(f"MISMATCH: expected {expected.lower()}, got {actual}", file=sys.stderr)
        return 1
    print("OK: sha256 matches")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.manifest] or manifest_paths()
    failed = 0
    for path in paths:
        entries = read_manifest(path)
        print(f"{path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, schema OK")
        if not args.fetch:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            for entry in entries:
                live = _check_sources(entry, Path(tmp))
                sources = len(entry.urls)
                failed += sources - live
                print(f"  {entry.name}: {live}/{sources} source(s) live")
    return 1 if failed else 0


def _check_sources(entry, tmp: Path) -> int:
    """Download and verify each source of ``entry`` alone; returns how many gave its bytes."""
    live = 0
    for i, url in enumerate(ordered_sources(entry.urls)):
        one = dataclasses.replace(entry, urls=(url,))
        caches = {"cache": tmp / entry.name / str(i), "hub_cache": tmp / entry.name / f"hub{i}"}
        try:
            download(one, progress=False, **caches)
            live += 1
            print(f"  {entry.name}: {url} OK")
        except ZooError as err:
            print(f"  {entry.name}: {url} FAILED: {err}", file=sys.stderr)
    return live


def _seconds(text: str) -> float:
    """``--timeout``: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def _add_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for a host's first byte (default {DEFAULT_TIMEOUT}); a transfer "
        "may take that plus its size at 10 KiB/s",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m solo_bayesncl.zoo``."""
    parser = argparse.ArgumentParser(
        prog=command_name("solo-bayesncl-zoo"),  # as the user ran it
        description="List, download, export, verify and check solo-bayesncl zoo weights.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the manifest entries")
    p.add_argument("--json", action="store_true", help="print the entries as JSON")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("fields", help="describe every field of a manifest entry")
    p.set_defaults(func=_cmd_fields)

    p = sub.add_parser("download", help="download an entry into the cache and print its path")
    p.add_argument("name")
    p.add_argument("--cache", help="cache folder (default $SOLO_BAYESNCL_CACHE)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_timeout(p)
    p.set_defaults(func=_cmd_download)

    p = sub.add_parser(
        "export",
        help="write the zoo artifact, sha256 and entry of a checkpoint, or (--hub-folder) a "
        "Hugging Face Hub model folder",
    )
    p.add_argument("ckpt", help="Lightning .ckpt with args.json beside it")
    p.add_argument(
        "--name",
        help="entry name, e.g. bayesncl-resnet18-cifar100 (required without --hub-folder; "
        "with it, default: the folder's name)",
    )
    p.add_argument(
        "--hub-folder",
        metavar="DIR",
        help="write model.safetensors, config.json and a README.md model card into DIR "
        "(a Hub model repository; upload it with `publish`)",
    )
    p.add_argument("--license", default="mit", help="--hub-folder: license of the weights")
    p.add_argument("--base-model", help="--hub-folder: Hub id of the model this one started from")
    p.add_argument("--repo", help="--hub-folder: OWNER/NAME it will be published to (card)")
    p.add_argument("--out", default=".", help="output folder (default: current)")
    p.add_argument("--fp16", action="store_true", help="store weights in float16")
    p.add_argument("--url", action="append", default=[], help="upload URL (repeatable)")
    p.add_argument(
        "--metrics",
        help="JSON file of evaluation figures, e.g. an evaluation report's metrics.json "
        "(default: metrics.json beside the checkpoint)",
    )
    p.add_argument("--keep-momentum", action="store_true", help="keep momentum copies/queue")
    p.add_argument("--description", help="one-line description for the entry")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export of --name")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser(
        "publish",
        help="upload a --hub-folder export to the Hugging Face Hub and print its manifest entry",
    )
    p.add_argument("folder", help="the folder `export --hub-folder` wrote")
    p.add_argument("--repo", required=True, help="Hub model repository OWNER/NAME")
    p.add_argument("--name", help="entry name (default: the repository's name)")
    p.add_argument("--url", action="append", default=[], help="https mirror of the weights")
    p.add_argument("--private", action="store_true", help="create the repository private")
    p.add_argument("--message", help="commit message")
    _add_timeout(p)
    p.set_defaults(func=_cmd_publish)

    p = sub.add_parser("verify", help="hash an artifact and compare with the manifest")
    p.add_argument("file")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--name", help="compare with this manifest entry's sha256")
    group.add_argument("--sha256", help="compare with this hash")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("check", help="validate manifests; --fetch also downloads every source")
    p.add_argument("manifest", nargs="*", help="manifest files (default: the configured ones)")
    p.add_argument(
        "--fetch",
        action="store_true",
        help="download and verify every source (Hub and URL) alone; report each entry's live ones",
    )
    p.set_defaults(func=_cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "export" and not (args.name or args.hub_folder):
        parser.error("export needs --name (or --hub-folder DIR)")
    try:
        return args.func(args)
    except (ZooError, ArtifactError, OSError) as err:
        return error_status(err)

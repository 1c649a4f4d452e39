"""Turn one report folder (optionally two) into a static, offline HTML dashboard (opens from
``file://``): ``index.html`` (cards of the active dimensions, best-evidenced first),
``dim.html?d=ID``, ``data.js`` (``window.DASHBOARD_DATA``: browsers block ``fetch()`` of local
files), ``thumbs/`` sprite sheets, ``assets/``; with a second report ``compare.html`` and ``b/``.
A rebuild removes only the files ``.dashboard-files.json`` lists; a build is written into a
hidden sibling folder and moved in once complete."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from solo_bayesncl.io.files import remove_stale_temporaries, replacing_folder, require_writable
from solo_bayesncl.metrics import (
    EPS,
    MIN_SUPPORT,
    SIGNIFICANCE,
    TOP_IMAGES,
    WILSON_Z,
    evidence_order,
    wilson_lower_bound,
)

from .bundle import FeatureBundle, load_feature_bundle
from .sprites import FORMATS, write_sprite_sheets
from .summaries import class_specificity, most_specific_dims, summarize_dimensions
from .tiles import header_tiles

DATA_FILE = "data.js"
DATA_GLOBAL = "DASHBOARD_DATA"
INDEX_PAGE = "index.html"
"""Rendered per model (a Jinja template: the header's tiles are written into the page)."""
PAGES = ("dim.html",)
"""Copied as they are."""
ASSETS = ("dashboard.css", "dashboard.js")
COMPARE_SUBDIR = "b"
FORMAT_VERSION = 1
MANIFEST_FILE = ".dashboard-files.json"


#: The suffix of the hidden folder a build is written into before it moves in.
PARTIAL_SUFFIX = ".partial"


def _manifest_files(out: Path) -> list[Path]:
    """The files an earlier build listed in ``out``'s manifest (inside ``out`` only)."""
    path = out / MANIFEST_FILE
    try:
        listed = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a readable dashboard manifest ({err})") from None
    root = out.resolve()
    files = []
    for rel in listed:
        target = (out / str(rel)).resolve()
        if root in target.parents:  # never outside the folder, whatever the manifest says
            files.append(out / str(rel))
    return files


FACT_METRICS = frozenset({"num_samples", "num_dims", "active_dims"})
"""Metrics the page already shows as facts (images, dimensions, active dimensions): one tile each."""


def _sig(values: np.ndarray, digits: int = 4) -> list:
    """Floats rounded to ``digits`` significant digits (keeps data.js small)."""
    arr = np.asarray(values, dtype=np.float64)
    return (
        [float(f"{v:.{digits}g}") for v in arr.reshape(-1)]
        if arr.ndim <= 1
        else [_sig(row, digits) for row in arr]
    )


def _trim(index_rows: np.ndarray, value_rows: np.ndarray, tile_of: np.ndarray) -> tuple:
    """Per dimension, drop -1 padding and map image indices to tile ids."""
    tiles, values = [], []
    for idx, val in zip(index_rows, value_rows, strict=True):
        keep = idx >= 0
        tiles.append(tile_of[idx[keep]].tolist())
        values.append(_sig(val[keep]))
    return tiles, values


def _dashboard_data(
    bundle: FeatureBundle,
    thumbs_dir: Path,
    *,
    top_k: int,
    top_purity_images: int | None,
    n_random: int,
    n_bins: int,
    seed: int,
    thumb_format: str,
    min_support: float,
    nav: dict[str, Any],
) -> dict[str, Any]:
    """Summaries, sprite sheets and page data for one model."""
    if top_purity_images is None:
        top_purity_images = bundle.top_images or TOP_IMAGES
    summ = summarize_dimensions(
        bundle.features,
        bundle.labels,
        bundle.num_classes,
        top_k=top_k,
        top_purity_images=top_purity_images,
        n_random=n_random,
        n_bins=n_bins,
        seed=seed,
    )
    active = summ.active_dims
    # Default order: purity weighed by support, dimensions under min_support last.
    order = evidence_order(
        summ.active_count, summ.purity, bundle.num_images, min_support=min_support
    )
    evidence = wilson_lower_bound(summ.purity, summ.active_count)

    refs = np.concatenate([summ.top_index[order].reshape(-1), summ.random_index[order].reshape(-1)])
    images = np.unique(refs[refs >= 0])  # each referenced image once
    tile_of = np.full(bundle.num_images, -1, np.int64)
    tile_of[images] = np.arange(len(images))
    layout = write_sprite_sheets(bundle.thumbnails[images], thumbs_dir, fmt=thumb_format)

    top_tiles, top_vals = _trim(summ.top_index[order], summ.top_value[order], tile_of)
    rnd_tiles, rnd_vals = _trim(summ.random_index[order], summ.random_value[order], tile_of)

    class_sizes = np.bincount(bundle.labels, minlength=bundle.num_classes)
    score = class_specificity(summ.class_counts, class_sizes)
    spec_dims, spec_vals = most_specific_dims(score)
    specific = []
    for c in range(bundle.num_classes):
        keep = spec_dims[c] >= 0
        dims_c = spec_dims[c][keep]
        n_c = summ.class_counts[dims_c, c]
        specific.append(
            {
                "dims": dims_c.tolist(),
                "score": _sig(spec_vals[c][keep]),
                "purity": _sig(n_c / np.maximum(summ.active_count[dims_c], 1)),
                "coverage": _sig(n_c / max(int(class_sizes[c]), 1)),
            }
        )

    gate = bundle.gate_open_rate
    meta = {
        "method": bundle.method,
        "checkpoint": bundle.checkpoint,
        "dataset": bundle.dataset,
        "metrics": {
            k: (v if np.isfinite(v) else None)
            for k, v in bundle.metrics.items()
            if k not in FACT_METRICS  # shown once, as the facts below
        },
        "n_images": bundle.num_images,
        "n_dims": bundle.num_dims,
        "n_active": len(active),
        "eps": EPS,
        "significance": SIGNIFICANCE,
        "min_support": min_support,
        "evidence_z": WILSON_Z,
        "signed": bool((bundle.features < 0).any()),
        "seed": seed,
        "top_k": top_k,
        "top_purity_images": summ.top_purity_images,
        "n_random": n_random,
        "gate_mean": None if gate is None else float(gate.mean()),
        "gate_never_open": None if gate is None else int((gate <= 0).sum()),
    }
    return {
        "version": FORMAT_VERSION,
        "meta": meta,
        "nav": nav,
        "class_names": bundle.class_names,
        "class_sizes": class_sizes.tolist(),
        "sprite": layout.to_json(),
        "images": {"index": images.tolist(), "label": bundle.labels[images].tolist()},
        "dims": {
            "id": order.tolist(),
            "count": summ.active_count[order].tolist(),
            "majority": summ.majority[order].tolist(),
            "purity": _sig(summ.purity[order]),
            "evidence": _sig(evidence[order]),
            "top_purity": _sig(summ.top_purity[order]),
            "significant": summ.significant[order].tolist(),
            "mean": _sig(summ.mean_active[order]),
            "gate": None if gate is None else _sig(gate[order]),
            "top": top_tiles,
            "top_value": top_vals,
            "random": rnd_tiles,
            "random_value": rnd_vals,
            "class_counts": summ.class_counts[order].tolist(),
            "hist": summ.hist_counts[order].tolist(),
            "hist_low": _sig(summ.hist_low[order]),
            "hist_high": _sig(summ.hist_high[order]),
        },
        "specific": specific,
    }


def _write_data_js(data: dict[str, Any], path: Path) -> None:
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    text = text.replace("</", "<\\/")  # never close a <script> early, whatever the names say
    path.write_text(f"window.{DATA_GLOBAL} = {text};\n", encoding="utf-8")


def _write_index(bundle: FeatureBundle, n_active: int, path: Path) -> None:
    """``index.html`` with this model's header: its title, leading and folded tiles."""
    template = resources.files(__package__).joinpath("assets", INDEX_PAGE).read_text("utf-8")
    lead, folded = header_tiles(bundle, n_active, skip=FACT_METRICS)
    fields = {k: getattr(bundle, k) for k in ("method", "dataset", "checkpoint")}
    page = jinja2.Template(template, autoescape=True).render(lead=lead, folded=folded, **fields)
    path.write_text(page, encoding="utf-8")


def _copy_static(out: Path, pages: tuple[str, ...]) -> None:
    static = resources.files(__package__).joinpath("assets")
    (out / "assets").mkdir(parents=True, exist_ok=True)
    for name in ASSETS:
        (out / "assets" / name).write_bytes(static.joinpath(name).read_bytes())
    for name in pages:
        (out / name).write_bytes(static.joinpath(name).read_bytes())


def _previous_build(out: Path) -> list[Path]:
    """The files the previous build wrote in ``out`` (its manifest's), none for a new or empty
    folder; refuses a file in place of ``out`` and a non-empty folder without a manifest."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} exists and is not a folder")
    if out.is_dir() and (out / MANIFEST_FILE).is_file():
        return [*_manifest_files(out), out / MANIFEST_FILE]
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir())
        if foreign:
            raise FileExistsError(
                f"--out {out} holds files no dashboard build wrote ({', '.join(foreign[:5])}"
                f"{', ...' if len(foreign) > 5 else ''}); choose an empty or new folder"
            )
    return []


def _remove_empty_folders(out: Path, files: list[Path]) -> None:
    """Removes the folders of ``files`` inside ``out`` that are left empty, deepest first."""
    folders = {p for f in files for p in f.parents if out in p.parents}
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def _build_one(bundle: FeatureBundle, out: Path, nav: dict[str, Any], **options: Any) -> None:
    data = _dashboard_data(bundle, out / "thumbs", nav=nav, **options)
    _write_data_js(data, out / DATA_FILE)
    _write_index(bundle, data["meta"]["n_active"], out / INDEX_PAGE)
    _copy_static(out, PAGES)


def _write_manifest(staging: Path) -> None:
    """``.dashboard-files.json``: every file of the build, relative to its folder."""
    files = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
    text = json.dumps({"files": [*files, MANIFEST_FILE]}, indent=1) + "\n"
    (staging / MANIFEST_FILE).write_text(text, encoding="utf-8")


def build_dashboard(
    report_dir: str | Path,
    out_dir: str | Path,
    compare_dir: str | Path | None = None,
    *,
    top_k: int = 16,
    top_purity_images: int | None = None,
    n_random: int = 8,
    n_bins: int = 24,
    seed: int = 0,
    thumb_format: str = "jpeg",
    min_support: float = MIN_SUPPORT,
) -> Path:
    """Build the dashboard of ``report_dir`` into ``out_dir``; return the path of ``index.html``.
    ``compare_dir``: a second report over the same classes, shown beside the first; ``top_k``:
    top images kept per dimension (``top_purity_images`` those a card shows); ``n_random``: random
    firing images; ``min_support``: share of images a dimension must fire on to lead the order."""
    if not 0 <= min_support <= 1:
        raise ValueError(f"min_support must lie in [0, 1], got {min_support}")
    if thumb_format not in FORMATS:
        raise ValueError(f"thumb_format must be one of {sorted(FORMATS)}, got {thumb_format!r}")
    require_writable(out_dir)  # before any work
    bundle = load_feature_bundle(report_dir)
    other = load_feature_bundle(compare_dir) if compare_dir is not None else None
    if other is not None and other.class_names != bundle.class_names:
        raise ValueError(
            f"cannot compare {report_dir} and {compare_dir}: their class_names differ "
            f"({bundle.class_names[:5]}... vs {other.class_names[:5]}...)"
        )
    out = Path(out_dir)
    remove_stale_temporaries(out, PARTIAL_SUFFIX)
    previous = _previous_build(out)
    options = dict(
        top_k=top_k,
        top_purity_images=top_purity_images,
        n_random=n_random,
        n_bins=n_bins,
        seed=seed,
        thumb_format=thumb_format,
        min_support=min_support,
    )
    compare = "compare.html" if other is not None else None
    stale = tuple(p.relative_to(out).as_posix() for p in previous)
    with replacing_folder(out, PARTIAL_SUFFIX, stale, last=(INDEX_PAGE, MANIFEST_FILE)) as staging:
        _build_one(bundle, staging, {"root": "", "compare": compare, "side": "a"}, **options)
        if other is not None:
            nav = {"root": "../", "compare": "../compare.html", "side": "b"}
            _build_one(other, staging / COMPARE_SUBDIR, nav, **options)
            _copy_static(staging, ("compare.html",))
        _write_manifest(staging)
    _remove_empty_folders(out, previous)

    return out / "index.html"

"""The pictures of the evaluation report. Every function takes plain arrays (and the
:class:`~solo_bayesncl.metrics.DimensionStats` the metrics already computed), writes one PNG and
returns its path; figures are drawn on their own Agg canvas, so importing this module leaves
pyplot's global backend alone."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from solo_bayesncl.metrics import DimensionStats, TopImages

__all__ = [
    "plot_active_dims_per_image",
    "plot_class_histograms",
    "plot_gate_open_rates",
    "plot_retrieval_precision",
    "plot_top_activations",
]

_DPI = 110
_MATCH = np.array([46, 160, 67], dtype=np.uint8)  # green border: label = dimension's majority
_MISMATCH = np.array([214, 39, 40], dtype=np.uint8)  # red border: another class
_RETRIEVAL_KEY = re.compile(r"^retrieval_p@(\d+)(?:_m(\d+))?$")


def _figure(figsize: tuple[float, float]) -> Figure:
    """A figure with its own Agg canvas (no pyplot, no global backend)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def _saved(fig: Figure, path: str | Path, tight: bool = True) -> Path:
    """Lays ``fig`` out (``tight``), writes it to ``path`` and returns the path."""
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    return Path(path)


def _class_name(class_names: Sequence[str], index: int) -> str:
    return class_names[index] if 0 <= index < len(class_names) else "none"


def _strip(thumbs: np.ndarray, labels: np.ndarray, majority: int, columns: int) -> np.ndarray:
    """One row of thumbnails side by side with a coloured border, padded to ``columns`` cells."""
    h, w = thumbs.shape[1:3]
    width = max(1, min(h, w) // 16)
    gap = np.full((h, max(2, w // 16), 3), 255, dtype=np.uint8)
    cells = []
    for i in range(columns):
        if i < len(thumbs):
            colour = _MATCH if labels[i] == majority else _MISMATCH
            cell = thumbs[i].copy()
            cell[:width], cell[-width:], cell[:, :width], cell[:, -width:] = (colour,) * 4
            cells.append(cell)
        else:
            cells.append(np.full((h, w, 3), 255, dtype=np.uint8))
        cells.append(gap)
    return np.concatenate(cells[:-1], axis=1)


def plot_top_activations(
    path: str | Path,
    top: TopImages,
    purity_top: Sequence[float],
    labels: np.ndarray,
    thumbnails: np.ndarray,
    stats: DimensionStats,
    class_names: Sequence[str],
    significant: Sequence[bool] | None = None,
    title: str = "most selective",
) -> Path:
    """Grid of the top images of each dimension of ``top``, one row each, labelled with its majority
    class ("n.s." unless ``significant``) and purities; a thumbnail's border is green when its
    label is the majority class, red otherwise."""
    dims, per_dim = top.dims.tolist(), top.index.shape[1]
    rows = max(len(dims), 1)
    h, w = thumbnails.shape[1:3] if thumbnails.size else (32, 32)
    strip_aspect = (per_dim * w + (per_dim - 1) * max(2, w // 16)) / h
    # explicit layout in inches: label column, image strips, title band
    row_h, gap_h, label_w, title_h, margin = 0.85, 0.12, 2.1, 0.45, 0.15
    strip_w = row_h * strip_aspect
    fig_w = label_w + strip_w + margin
    fig_h = title_h + rows * (row_h + gap_h) + margin
    fig = _figure(figsize=(fig_w, fig_h))
    fig.text(
        0.5,
        1 - 0.5 * title_h / fig_h,
        f"Top-{per_dim} activating validation images of the {len(dims)} {title} dimensions\n"
        "border: green = the dimension's majority class, red = another class",
        ha="center",
        va="center",
        fontsize=9,
    )
    axes = [
        fig.add_axes(
            (
                label_w / fig_w,
                1 - (title_h + (r + 1) * (row_h + gap_h) - gap_h) / fig_h,
                strip_w / fig_w,
                row_h / fig_h,
            )
        )
        for r in range(rows)
    ]
    active_count = stats.active_count.numpy()
    flags = list(significant) if significant is not None else [True] * len(dims)
    rows_of = {
        int(d): (row[row >= 0], float(p))
        for d, row, p in zip(dims, top.index.numpy(), purity_top, strict=True)
    }
    for ax, dim, flag in zip(axes, dims or [None], flags or [True], strict=False):
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
        if dim is None:
            ax.text(0.5, 0.5, "no active dimension", ha="center", va="center")
            continue
        order, top_purity = rows_of[int(dim)]
        majority = int(stats.majority_class[dim])
        strip = (
            _strip(thumbnails[order], labels[order], majority, per_dim)
            if thumbnails.size
            else np.full((h, w * per_dim, 3), 255, dtype=np.uint8)
        )
        ax.imshow(strip, interpolation="nearest", aspect="auto")
        ax.set_ylabel(
            f"dim {dim}\n{_class_name(class_names, majority)}{'' if flag else ' (n.s.)'}\n"
            f"purity {float(stats.purity[dim]):.2f} of n={int(active_count[dim])}\n"
            f"its share of the top {per_dim}: {top_purity:.2f}",
            rotation=0,
            ha="right",
            va="center",
            fontsize=8,
        )
    return _saved(fig, path, tight=False)


def plot_class_histograms(
    path: str | Path,
    dims: Sequence[int],
    stats: DimensionStats,
    class_names: Sequence[str],
    columns: int = 4,
) -> Path:
    """For each dimension of ``dims``, its active samples per class, the majority highlighted."""
    dims = list(dims)
    num_classes = stats.class_histogram.shape[1]
    columns = max(1, min(columns, len(dims) or 1))
    rows = max(1, -(-len(dims) // columns))
    fig = _figure(figsize=(3.3 * columns, 2.4 * rows + 0.4))
    axes = fig.subplots(rows, columns, squeeze=False, sharey=False)
    fig.suptitle("Class histogram of the active samples of each dimension", fontsize=10)
    x = np.arange(num_classes)
    show_names = num_classes <= 12
    for i, ax in enumerate(axes.flat):
        if i >= len(dims):
            ax.axis("off")
            continue
        dim = dims[i]
        counts = stats.class_histogram[dim].numpy()
        majority = int(stats.majority_class[dim])
        colours = ["tab:orange" if c == majority else "tab:blue" for c in x]
        ax.bar(x, counts, color=colours, width=0.85)
        ax.set_title(
            f"dim {dim}: {_class_name(class_names, majority)} "
            f"(purity {float(stats.purity[dim]):.2f}, n={int(counts.sum())})",
            fontsize=8,
        )
        ax.tick_params(labelsize=6)
        if show_names:
            ax.set_xticks(x, [str(c)[:12] for c in class_names[:num_classes]], rotation=60)
        else:
            ax.set_xlabel("class index", fontsize=7)
    if not dims:
        axes[0, 0].axis("on")
        axes[0, 0].text(0.5, 0.5, "no active dimension", ha="center", va="center")
    return _saved(fig, path)


def retrieval_curves(metrics: Mapping[str, float]) -> dict[int, list[tuple[int, float]]]:
    """``{K: [(m, P@K with m dims), ...]}`` from a metrics dict, ``m`` ascending; the all-dims
    entry ``retrieval_p@K`` is placed at ``m = num_dims``."""
    num_dims = int(metrics.get("num_dims", 0))
    curves: dict[int, dict[int, float]] = {}
    for key, value in metrics.items():
        match = _RETRIEVAL_KEY.match(key)
        if match:
            k = int(match.group(1))
            m = int(match.group(2)) if match.group(2) else num_dims
            curves.setdefault(k, {})[m] = float(value)
    return {k: sorted(points.items()) for k, points in sorted(curves.items())}


def plot_retrieval_precision(
    path: str | Path, metrics_by_setting: Mapping[str, Mapping[str, float]]
) -> Path:
    """P@K against the number of most activated dims kept, one line per K and per setting."""
    fig = _figure(figsize=(6, 4))
    ax = fig.subplots()
    styles = ["-", "--", ":", "-."]
    plotted = False
    ticks: set[int] = set()
    for s, (setting, metrics) in enumerate(metrics_by_setting.items()):
        for c, (k, points) in enumerate(retrieval_curves(metrics).items()):
            ms, values = zip(*points, strict=True)
            ticks.update(ms)
            ax.plot(
                ms,
                values,
                styles[s % len(styles)],
                marker="o",
                color=f"C{c}",
                label=f"P@{k} ({setting})" if len(metrics_by_setting) > 1 else f"P@{k}",
            )
            plotted = True
    if plotted:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(ticks), [str(m) for m in sorted(ticks)])
        ax.minorticks_off()
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "retrieval precision not computed", ha="center", va="center")
    ax.set_xlabel("dimensions kept (most activated first)")
    ax.set_ylabel("precision (same class)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title("Retrieval precision against dimensions kept")
    return _saved(fig, path)


def _integer_bins(values: np.ndarray, upper: int) -> np.ndarray:
    top = max(int(values.max()) if values.size else 0, 1)
    top = min(max(top, 1), max(upper, 1))
    step = max(1, int(np.ceil((top + 1) / 60)))
    return np.arange(0, top + step + 1, step) - 0.5


def plot_active_dims_per_image(
    path: str | Path, active_per_image: np.ndarray, num_dims: int
) -> Path:
    """Histogram of the number of active dimensions of each image (out of ``num_dims``)."""
    counts = np.asarray(active_per_image)
    fig = _figure(figsize=(6, 4))
    ax = fig.subplots()
    ax.hist(counts, bins=_integer_bins(counts, num_dims), color="tab:blue")
    mean = float(counts.mean()) if counts.size else 0.0
    ax.axvline(mean, color="tab:red", linestyle="--", label=f"mean {mean:.1f}")
    ax.set_xlabel(f"active dimensions per image (of {num_dims})")
    ax.set_ylabel("images")
    ax.set_title("Active dimensions per image")
    ax.legend(fontsize=8)
    return _saved(fig, path)


def plot_gate_open_rates(path: str | Path, gate_open: np.ndarray) -> Path:
    """BayesNCL's hard gate: histogram of each dimension's open rate (share of images with the
    gate open) and of the number of open gates per image. ``gate_open`` is ``(N, k)`` bool."""
    gate_open = np.asarray(gate_open, dtype=bool)
    rates = gate_open.mean(axis=0) if gate_open.size else np.zeros(gate_open.shape[1])
    per_image = gate_open.sum(axis=1)
    fig = _figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2)
    left.hist(rates, bins=np.linspace(0, 1, 21), color="tab:purple")
    left.set_xlabel("gate-open rate (share of images)")
    left.set_ylabel("dimensions")
    left.set_title(
        f"Per-dimension gate-open rate ({int((rates == 0).sum())} never, "
        f"{int((rates == 1).sum())} always open)",
        fontsize=9,
    )
    right.hist(per_image, bins=_integer_bins(per_image, gate_open.shape[1]), color="tab:green")
    right.set_xlabel(f"open gates per image (of {gate_open.shape[1]})")
    right.set_ylabel("images")
    right.set_title(f"Open gates per image (mean {float(per_image.mean()):.1f})", fontsize=9)
    return _saved(fig, path)

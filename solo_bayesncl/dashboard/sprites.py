"""Thumbnail sprite sheets: every referenced image stored once, in a few large images.

Each tile sits in a cell with a ``margin``-pixel border that repeats the tile's edge pixels, so a
browser scaling a tile with bilinear filtering never blends in a neighbouring image. A page shows
tile ``t`` by clipping ``sheet_{t // per_sheet}`` to the tile's rectangle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

FORMATS = {"jpeg": "jpg", "png": "png", "webp": "webp"}


@dataclass
class SpriteLayout:
    """Where tile ``t`` lives: sheet ``t // per_sheet``, cell ``t % per_sheet`` in row-major order."""

    files: list[str]
    cols: int
    rows: int
    per_sheet: int
    tile_w: int
    tile_h: int
    cell_w: int
    cell_h: int
    margin: int
    sheet_w: int

    def to_json(self) -> dict:
        return asdict(self)


def write_sprite_sheets(
    tiles: np.ndarray,
    out_dir: Path,
    *,
    fmt: str = "jpeg",
    quality: int = 90,
    max_sheet_px: int = 2048,
    margin: int = 1,
) -> SpriteLayout:
    """Write ``tiles`` (M, h, w, 3) uint8 into sprite sheets under ``out_dir`` as ``fmt``: ``jpeg``
    (4:4:4 chroma, so colours do not bleed), ``png`` or ``webp``; the layout's file names are
    relative to ``out_dir``'s parent (``thumbs/sheet_000.jpg``)."""
    if fmt not in FORMATS:
        raise ValueError(f"thumb format must be one of {sorted(FORMATS)}, got {fmt!r}")
    if tiles.ndim != 4 or tiles.shape[-1] != 3 or tiles.dtype != np.uint8:
        raise ValueError(f"tiles must be (M, h, w, 3) uint8, got {tiles.shape} {tiles.dtype}")
    m, h, w, _ = tiles.shape
    cell_h, cell_w = h + 2 * margin, w + 2 * margin
    cols = max(1, min(max_sheet_px // cell_w, max(m, 1)))
    rows = max(1, max_sheet_px // cell_h)
    per_sheet = cols * rows
    out_dir.mkdir(parents=True, exist_ok=True)
    padded = np.pad(tiles, ((0, 0), (margin, margin), (margin, margin), (0, 0)), mode="edge")
    files: list[str] = []
    for sheet, start in enumerate(range(0, m, per_sheet)):
        chunk = padded[start : start + per_sheet]
        used_rows = -(-len(chunk) // cols)
        grid = np.zeros((used_rows * cols, cell_h, cell_w, 3), np.uint8)
        grid[: len(chunk)] = chunk
        image = grid.reshape(used_rows, cols, cell_h, cell_w, 3).transpose(0, 2, 1, 3, 4)
        image = image.reshape(used_rows * cell_h, cols * cell_w, 3)
        name = f"sheet_{sheet:03d}.{FORMATS[fmt]}"
        pil = Image.fromarray(image)
        if fmt == "jpeg":
            pil.save(out_dir / name, quality=quality, subsampling=0)
        elif fmt == "webp":
            pil.save(out_dir / name, quality=quality, method=4)
        else:
            pil.save(out_dir / name, optimize=True)
        files.append(f"{out_dir.name}/{name}")
    return SpriteLayout(
        files=files,
        cols=cols,
        rows=rows,
        per_sheet=per_sheet,
        tile_w=w,
        tile_h=h,
        cell_w=cell_w,
        cell_h=cell_h,
        margin=margin,
        sheet_w=cols * cell_w,
    )

"""Glyphs: procedurally drawn digits 0-9, an offline image-classification set of any size (no download, no fonts).

Each image is a digit drawn from a fixed stroke skeleton (polylines in a unit box) with per-image random changes:
every control point moved (``point_jitter``), an affine map (rotation, shear, anisotropic scale, translation),
stroke width, blur, background gradient, distractor strokes and pixel noise. Strokes are drawn at ``SUPERSAMPLE``
times the final size with PIL and box-averaged down: the same seed and settings give the same images on every
machine with the same numpy and Pillow versions (numpy's PCG64 stream, PIL's integer rasterizer; no system fonts).
``glyphs.json`` records both versions.

Write a set once, then train on it::

    python -m deq_vision.data glyphs --output-dir data/glyphs                     # 20,000 train / 5,000 test, 16x16
    python -m deq_vision.train --config glyphs-mdeq --data-dir data/glyphs

Layout: ``DIR/train.npz`` and ``DIR/test.npz`` (``images`` (N, S, S) uint8, ``labels`` (N,) int64; read with
``allow_pickle=False``) and ``DIR/glyphs.json`` (the generator's settings). Train and test use disjoint seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import PIL
from PIL import Image, ImageDraw, ImageFilter

from deq_core.train.cli import usage_error
from deq_core.train.errors import UsageError
from deq_core.train.files import write_file, write_json

from .arrays import ArrayImages
from .errors import DatasetError

SUPERSAMPLE = 4
FILES = {True: "train.npz", False: "test.npz"}
META = "glyphs.json"


def _arc(cx: float, cy: float, rx: float, ry: float, a0: float, a1: float, n: int = 9) -> list[tuple[float, float]]:
    """Points of an elliptic arc from angle a0 to a1 (degrees; 0 = right, 90 = down, image coordinates)."""
    t = np.radians(np.linspace(a0, a1, n))
    return [(cx + rx * float(np.cos(a)), cy + ry * float(np.sin(a))) for a in t]


# Skeletons in the unit box (x right, y down): a list of strokes, each a polyline of (x, y) points.
SKELETONS: tuple[tuple[list[tuple[float, float]], ...], ...] = (
    (_arc(0.5, 0.5, 0.28, 0.4, 0, 360, 17),),
    ([(0.35, 0.25), (0.55, 0.1), (0.55, 0.9)], [(0.38, 0.9), (0.72, 0.9)]),
    (_arc(0.5, 0.32, 0.26, 0.22, 190, 370) + [(0.25, 0.9), (0.78, 0.9)],),
    (_arc(0.48, 0.3, 0.24, 0.2, 200, 450), _arc(0.48, 0.7, 0.27, 0.2, 270, 520)),
    ([(0.62, 0.9), (0.62, 0.1), (0.2, 0.65), (0.8, 0.65)],),
    ([(0.75, 0.1), (0.3, 0.1), (0.27, 0.45)] + _arc(0.5, 0.65, 0.26, 0.25, 220, 500),),
    ([(0.7, 0.12), (0.38, 0.4)] + _arc(0.5, 0.66, 0.24, 0.24, 200, 560),),
    ([(0.22, 0.1), (0.78, 0.1), (0.4, 0.9)],),
    (_arc(0.5, 0.3, 0.2, 0.2, 0, 360, 13), _arc(0.5, 0.7, 0.26, 0.2, 0, 360, 13)),
    (_arc(0.5, 0.34, 0.24, 0.24, 0, 360, 13), [(0.74, 0.34), (0.68, 0.9)]),
)
NUM_CLASSES = len(SKELETONS)


@dataclasses.dataclass(frozen=True)
class GlyphStyle:
    """Ranges of the per-image random changes (units: the unit box for geometry, [0, 1] for intensities).

    point_jitter: std of each control point's offset. rotation: max |angle| in degrees. shear: max |shear|.
    scale: (min, max) of each axis' scale. shift: max |translation|. width: (min, max) stroke width as a fraction
    of the box. blur: max Gaussian blur radius in output pixels. distractors: max number of random short strokes.
    noise: std of the additive pixel noise. contrast: (min, max) of the glyph's intensity above the background.
    """

    point_jitter: float = 0.05
    rotation: float = 25.0
    shear: float = 0.3
    scale: tuple[float, float] = (0.65, 1.05)
    shift: float = 0.12
    width: tuple[float, float] = (0.06, 0.14)
    blur: float = 0.6
    distractors: int = 3
    noise: float = 0.12
    contrast: tuple[float, float] = (0.35, 1.0)


def _affine(rng: np.random.Generator, style: GlyphStyle) -> np.ndarray:
    """A random 2x3 affine map of the unit box about its centre."""
    angle = np.radians(rng.uniform(-style.rotation, style.rotation))
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    shear = np.array([[1.0, rng.uniform(-style.shear, style.shear)], [0.0, 1.0]])
    scale = np.diag(rng.uniform(*style.scale, size=2))
    linear = rot @ shear @ scale
    shift = rng.uniform(-style.shift, style.shift, size=2)
    centre = np.array([0.5, 0.5])
    return np.hstack([linear, (centre + shift - linear @ centre)[:, None]])


def _draw_strokes(draw: ImageDraw.ImageDraw, strokes: Sequence[np.ndarray], big: int, width: float) -> None:
    """Draw polylines given in unit-box coordinates on a ``big`` x ``big`` canvas (white on black)."""
    w = max(1, int(round(width * big)))
    for pts in strokes:
        xy = [(float(x * big), float(y * big)) for x, y in pts]
        draw.line(xy, fill=255, width=w, joint="curve")


def render_glyph(label: int, rng: np.random.Generator, size: int = 16, style: GlyphStyle | None = None) -> np.ndarray:
    """One image (size, size) uint8 of digit ``label`` with random changes drawn from ``rng``."""
    style = style or GlyphStyle()
    big = size * SUPERSAMPLE
    affine = _affine(rng, style)
    strokes = []
    for stroke in SKELETONS[label]:
        pts = np.asarray(stroke) + rng.normal(0.0, style.point_jitter, size=(len(stroke), 2))
        strokes.append(pts @ affine[:, :2].T + affine[:, 2])
    for _ in range(int(rng.integers(0, style.distractors + 1))):
        start = rng.uniform(0.0, 1.0, size=2)
        strokes.append(np.stack([start, start + rng.normal(0.0, 0.2, size=2)]))
    canvas = Image.new("L", (big, big), 0)
    _draw_strokes(ImageDraw.Draw(canvas), strokes, big, rng.uniform(*style.width))
    small = canvas.resize((size, size), Image.Resampling.BOX)
    radius = rng.uniform(0.0, style.blur)
    if radius > 0.05:
        small = small.filter(ImageFilter.GaussianBlur(radius))
    ink = np.asarray(small, dtype=np.float64) / 255.0
    yy, xx = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    background = rng.uniform(0.0, 0.4) + rng.uniform(-0.2, 0.2) * xx + rng.uniform(-0.2, 0.2) * yy
    image = background + rng.uniform(*style.contrast) * ink + rng.normal(0.0, style.noise, size=(size, size))
    return np.clip(np.round(image * 255.0), 0, 255).astype(np.uint8)


def generate(n: int, seed: int, size: int = 16, style: GlyphStyle | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (n, size, size) uint8 and balanced labels (n,) int64 (label i % 10, shuffled), from ``seed``."""
    if n < 1 or size < 4:
        raise ValueError(f"need n >= 1 images of size >= 4 pixels, got n={n}, size={size}.")
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % NUM_CLASSES).astype(np.int64)
    images = np.stack([render_glyph(int(c), rng, size, style) for c in labels])
    return images, labels


def write_glyphs(
    output_dir: str | Path, n_train: int = 20_000, n_test: int = 5_000, size: int = 16, seed: int = 0,
    style: GlyphStyle | None = None,
) -> Path:  # fmt: skip
    """Write ``train.npz``, ``test.npz`` and ``glyphs.json`` to ``output_dir`` (train from seed 2*seed, test from
    2*seed + 1: disjoint random streams). Returns the folder."""
    style = style or GlyphStyle()
    out = Path(output_dir)
    for train, n, split_seed in ((True, n_train, 2 * seed), (False, n_test, 2 * seed + 1)):
        images, labels = generate(n, split_seed, size, style)
        arrays = {"images": images, "labels": labels}
        write_file(out / FILES[train], lambda tmp, arrays=arrays: np.savez_compressed(tmp, **arrays))
    meta = {
        "n_train": n_train, "n_test": n_test, "size": size, "seed": seed, "style": dataclasses.asdict(style),
        "numpy": np.__version__, "pillow": PIL.__version__,
    }  # fmt: skip
    write_json(out / META, meta)
    return out


def read_split(data_dir: str | Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, S, S) uint8, labels (N,) int64) of one split.

    Raises:
        DatasetError: the file is missing or malformed; the message gives the command that writes it.
    """
    path = Path(data_dir) / FILES[train]
    hint = f"write the set with: python -m deq_vision.data glyphs --output-dir {Path(data_dir)}"
    if not path.is_file():
        raise DatasetError(f"glyphs file {path} not found: {hint}.")
    try:
        with np.load(path, allow_pickle=False) as data:
            images, labels = np.asarray(data["images"]), np.asarray(data["labels"])
    except (OSError, KeyError, ValueError) as err:
        raise DatasetError(f"{path} is not a glyphs file ({err}); {hint}.") from err
    if images.dtype != np.uint8 or images.ndim != 3 or labels.shape != (images.shape[0],):
        raise DatasetError(f"{path}: images {images.dtype} {images.shape}, labels {labels.shape}; {hint}.")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise DatasetError(f"{path}: labels outside 0..{NUM_CLASSES - 1}; {hint}.")
    return images, labels.astype(np.int64)


class Glyphs(ArrayImages):
    """A glyphs split as (PIL "L" image, label) pairs, after ``transform``.

    Args:
        data_dir: the folder written by :func:`write_glyphs`.
        train: the training split (else the test split).
        transform: applied to each PIL image (e.g. timm's ``create_transform``).
    """

    def __init__(self, data_dir: str | Path, train: bool = True, transform: Callable[[Any], Any] | None = None) -> None:
        self.images, self.targets = read_split(data_dir, train)
        self.transform = transform


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deq_vision.data glyphs", description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--train", type=int, default=20_000, help="training images")
    parser.add_argument("--test", type=int, default=5_000, help="test images")
    parser.add_argument("--size", type=int, default=16, help="image side in pixels")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        out = write_glyphs(args.output_dir, args.train, args.test, args.size, args.seed)
    except (ValueError, UsageError) as err:
        return usage_error(parser.prog, err)
    print(f"wrote {args.train} training and {args.test} test images ({args.size}x{args.size}) to {out}")
    return 0

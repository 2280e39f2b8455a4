"""The graphs this da3-edge ships for ``models build`` (edge/data/cores), and which of
them a config needs: numpy-free, so that ``card`` on a laptop can say what the Pi will
build without loading anything."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from edge.errors import ConfigError
from edge.models import LONGEST_SIDE, MODEL_NAME, da3_shape, size_shapes

if TYPE_CHECKING:
    from edge.config import Config

TEMPLATES = "cores"  # the package data folder (edge/data/cores)
PRECISIONS = ("fp16", "fp32")  # what the graphs are made for (int8: `da3-edge export`)


def template_name(shape: tuple[int, int], precision: str) -> str:
    return f"{MODEL_NAME}_{shape[0]}x{shape[1]}_{precision}.core.xz"


def templates_dir() -> Path:
    return Path(str(resources.files("edge") / "data" / TEMPLATES))


def available(folder: Path | None = None) -> dict[tuple[tuple[int, int], str], Path]:
    """The templates shipped (or in ``folder``), by (shape, precision)."""
    folder = folder or templates_dir()
    found = {}
    for path in sorted(folder.glob(f"{MODEL_NAME}_*x*_*.core.xz")):
        stem = path.name.removeprefix(f"{MODEL_NAME}_").removesuffix(".core.xz")
        size, precision = stem.split("_")
        h, w = size.split("x")
        found[(int(h), int(w)), precision] = path
    return found


def describe(shapes: set[tuple[int, int]]) -> str:
    """Shapes in few words: the sizes whose four aspects are all there, then the rest."""
    sizes = sorted({max(s) for s in shapes if set(size_shapes(max(s))) <= shapes})
    rest = sorted(s for s in shapes if max(s) not in sizes)
    words = [f"sizes {', '.join(map(str, sizes))} in the four aspects"] if sizes else []
    return ", ".join(words + [f"{h}x{w}" for h, w in rest])


def cores_for(config: Config, where: str) -> tuple[list[tuple[int, int]], list[str]]:
    """The cores the daemon of ``config`` runs, at its model.precision and model.size
    (0: DA3's own): every aspect a graph ships for at that size, the shape of the
    camera's frames first when it is one (else the daemon takes the nearest aspect).
    ConfigError (``where``: the config's name) when the precision or the size has none."""
    precision, size = config.model.precision, config.model.size or LONGEST_SIDE
    if precision not in PRECISIONS:
        raise ConfigError(
            f"{where}: model.precision is {precision!r}; the build makes fp16 and fp32 "
            "(int8: `da3-edge export`)"
        )
    have = {shape for shape, p in available() if p == precision}
    wanted = da3_shape(config.camera.height, config.camera.width, size)
    shapes = [s for s in dict.fromkeys([wanted, *size_shapes(size)]) if s in have]
    if not shapes:
        raise ConfigError(
            f"{where}: model.size {size}: no {precision} graph ships at that size "
            f"({describe(have)})"
        )
    return shapes, [precision]


def for_config(path: str | os.PathLike[str]) -> tuple[list[tuple[int, int]], list[str]]:
    """``cores_for`` the daemon of config file ``path``."""
    from edge import config

    return cores_for(config.load(path), str(path))

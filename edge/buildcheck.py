"""Whether the graphs this da3-edge fills compute DA3 on this device, from this release.

``models build`` fills shipped graphs with a release's tensors; its bytes equal the
export's where CI can show it. On the device itself, ``da3-edge models --verify`` runs
one more check, with no torch: it builds a core at the smallest shape (42x56) from the same
release and the same kind of template, runs it with LiteRT on a probe image, and
compares its depth and confidence with ``edge.forward``'s numpy computation of DA3 from
the release, within the parity limits of the precision (``edge.parity``). A wrong span,
a release that reads wrong on this machine, or a LiteRT that computes wrong here fails
it; the built cores' own bytes are checked by their hashes.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge import corebuild, forward, parity
from edge.errors import ModelCorrupt, WeightsError
from edge.models import sha256_file
from edge.release import Release, resolve_weights_file
from edge.stages import MEAN, STD

PROBE_SHAPE = (42, 56)  # a 3x4 patch grid: every weight in use, seconds on a Pi


@dataclass(frozen=True)
class Result:
    precision: str
    depth: dict[str, float]  # edge.parity.compare's numbers, against numpy
    conf: dict[str, float]


def probe_image(shape: tuple[int, int] = PROBE_SHAPE) -> np.ndarray:
    """A smooth, structured RGB image in [0, 1], ImageNet-normalised: (3, H, W) float32."""
    ys = np.linspace(-1, 1, shape[0])[:, None]
    xs = np.linspace(-1, 1, shape[1])[None, :]
    rgb = [
        0.5 + 0.3 * np.sin((2 + c) * xs + (3 - c) * ys + c) + 0.15 * np.cos(5 * xs * ys)
        for c in range(3)
    ]
    mean, std = (np.array(v)[:, None, None] for v in (MEAN, STD))
    image: np.ndarray = ((np.stack(rgb) - mean) / std).astype(np.float32)
    return image


def release_for(weights: str, where: Path) -> Path:
    """The release file at ``where`` if it is the one of provenance ``weights``
    ("sha256:..."), else ``WeightsError`` naming both."""
    path = resolve_weights_file(where)
    try:
        digest = f"sha256:{sha256_file(path)}"
    except OSError as exc:
        raise WeightsError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if digest != weights:
        raise WeightsError(
            f"{path}: not the release these models were built from ({digest[:19]}..., "
            f"the manifest has {weights[:19]}...)"
        )
    return path


Reference = tuple[np.ndarray, np.ndarray]  # numpy's depth and confidence of the probe


def reference(weights: Path) -> Reference:
    """DA3's depth and confidence of the probe image, computed with numpy from
    ``weights``: the same for every precision checked against it."""
    with Release(weights) as release:
        return forward.depth(release, probe_image())


def check(weights: Path, precision: str, ref: Reference | None = None) -> Result:
    """Build the probe core of ``precision`` from ``weights`` (in a temporary folder),
    run it, and compare with numpy's ``ref`` (computed here when not given);
    ``ModelCorrupt`` when outside the limits."""
    from edge.core import Core

    template = corebuild.find(PROBE_SHAPE, precision)
    image = probe_image()
    ref_depth, ref_conf = ref if ref is not None else reference(weights)
    with Release(weights) as release, tempfile.TemporaryDirectory(prefix="da3-edge-") as tmp:
        built = corebuild.build_core(template, release, Path(tmp) / "probe.tflite")
        # fp32 arithmetic: what is checked is the graph and its weights; XNNPACK's fp16
        # arithmetic (the A76's default for fp16 models) adds its own rounding (on the
        # emulated A76: rel-L2 7.8e-3 here), which the parity suite bounds elsewhere.
        with Core(built.path, threads=1, precision=precision, fp16_arithmetic=False) as core:
            depth, conf = core.run(image[None])
    result = Result(
        precision,
        parity.compare(ref_depth, depth, precision),
        parity.compare(ref_conf, conf, precision),
    )
    for name, numbers in (("depth", result.depth), ("confidence", result.conf)):
        if not numbers["ok"]:
            raise ModelCorrupt(
                f"the {precision} graph filled from {weights} does not compute DA3 here: "
                f"its {name} against numpy's has Pearson {numbers['pearson']:.6f}, "
                f"rel-L2 {numbers['rel_l2']:.2e} (limits: {_limits(precision)})"
            )
    return result


def _limits(precision: str) -> str:
    pearson, rel = parity.TOLERANCES[precision]
    return f">= {pearson}" + ("" if rel is None else f", <= {rel:g}")

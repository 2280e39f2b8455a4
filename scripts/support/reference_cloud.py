"""DA3's own point-cloud rule, for the geometry parity test (export environment):

    python -m scripts.support.reference_cloud IN.npz OUT.npz

IN holds ``depth`` and ``conf`` (H, W), ``image`` (H, W, 3) uint8 and ``K`` (3, 3);
OUT gets ``threshold`` (get_conf_thresh with export_to_glb's defaults), ``points`` and
``colours`` (_depths_to_world_points_with_colors with an identity pose). It shares no
code with ``edge``.

depth_anything_3/utils/export/glb.py is loaded on its own: its package's ``__init__``
imports every exporter (gsplat, imageio, ...) and glb.py imports trimesh and a depth
visualiser at the top, for the scene file and previews. Neither function used here
touches them, so they are stood in by empty modules; the functions run untouched.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np

# export_to_glb's defaults (depth_anything_3 0.1.1)
CONF_THRESH, LOW_PERCENTILE, HIGH_PERCENTILE = 1.05, 40.0, 90.0


def glb_module() -> Any:
    spec = importlib.util.find_spec("depth_anything_3.utils")
    assert spec is not None and spec.submodule_search_locations is not None
    export_dir = Path(next(iter(spec.submodule_search_locations))) / "export"
    package = types.ModuleType("depth_anything_3.utils.export")
    package.__path__ = [str(export_dir)]
    depth_vis = types.ModuleType("depth_anything_3.utils.export.depth_vis")
    depth_vis.export_to_depth_vis = None  # type: ignore[attr-defined]
    sys.modules.update(
        {
            "trimesh": types.ModuleType("trimesh"),
            "depth_anything_3.utils.export": package,
            "depth_anything_3.utils.export.depth_vis": depth_vis,
        }
    )
    return importlib.import_module("depth_anything_3.utils.export.glb")


def main(argv: list[str]) -> int:
    glb = glb_module()
    with np.load(argv[0]) as data:
        depth, conf, image, k = (data[key] for key in ("depth", "conf", "image", "K"))
    prediction = types.SimpleNamespace(conf=conf)
    threshold = glb.get_conf_thresh(prediction, None, CONF_THRESH, LOW_PERCENTILE, HIGH_PERCENTILE)
    points, colours = glb._depths_to_world_points_with_colors(
        depth[None], k[None], np.eye(4)[None], image[None], conf[None], threshold
    )
    np.savez(argv[1], threshold=np.float64(threshold), points=points, colours=colours)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

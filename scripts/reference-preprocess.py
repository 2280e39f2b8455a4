#!/usr/bin/env python3
"""Golden preprocessing tensors from DA3's own ``InputProcessor``.

Run in the export environment (torch, depth-anything-3, opencv-python-headless):

    .venv-export/bin/python scripts/reference-preprocess.py INPUTS.npz OUTPUTS.npz

INPUTS.npz holds (H, W, 3) uint8 RGB arrays; OUTPUTS.npz gets, under the same keys,
the (3, h, w) float32 tensors DA3 feeds its network (``upper_bound_resize`` to 504:
cv2 INTER_AREA to shrink, INTER_CUBIC to enlarge, sides to multiples of 14, ImageNet
mean/std).

``InputProcessor`` imports torchvision for ``ToTensor``/``Normalize`` only, and PyPI's
torchvision does not import beside the torch build used here. When it is missing, a
stand-in with the same two definitions (``/255`` and ``(x - mean) / std``, as
torchvision documents them) is put on the path; the resizing under test is DA3's and
OpenCV's code, untouched.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

SHIM = """
import numpy as np
import torch


class ToTensor:
    def __call__(self, pic):
        array = np.array(pic, dtype=np.uint8, copy=True)
        return torch.from_numpy(array).permute(2, 0, 1).contiguous().float().div(255)


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __call__(self, tensor):
        return tensor.sub(self.mean).div(self.std)


class CenterCrop:
    def __init__(self, size):
        raise NotImplementedError("not needed for single images")
"""


def ensure_torchvision() -> None:
    try:
        import torchvision.transforms  # noqa: F401
    except Exception:
        shim = Path(tempfile.mkdtemp(prefix="tv-shim-")) / "torchvision"
        shim.mkdir()
        (shim / "__init__.py").write_text("")
        (shim / "transforms.py").write_text(SHIM)
        sys.path.insert(0, str(shim.parent))
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]


def main(argv: list[str]) -> int:
    inputs, outputs = Path(argv[0]), Path(argv[1])
    ensure_torchvision()
    from depth_anything_3.utils.io.input_processor import InputProcessor

    processor = InputProcessor()
    results = {}
    with np.load(inputs) as data:
        for key in data.files:
            tensor, _, _, _ = processor._process_one(
                data[key], process_res=504, process_res_method="upper_bound_resize"
            )
            results[key] = tensor.numpy().astype(np.float32)
    np.savez(outputs, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

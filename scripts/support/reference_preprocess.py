#!/usr/bin/env python3
"""Golden preprocessing tensors from DA3's own ``InputProcessor``.

Run in the export environment (torch, depth-anything-3, opencv-python-headless):

    .venv-export/bin/python -m scripts.support.reference_preprocess INPUTS.npz OUTPUTS.npz [SIZE]

INPUTS.npz holds (H, W, 3) uint8 RGB arrays; OUTPUTS.npz gets, under the same keys,
the (3, h, w) float32 tensors DA3 feeds its network (``upper_bound_resize`` to SIZE,
its ``process_res``, 504 unless given:
cv2 INTER_AREA to shrink, INTER_CUBIC to enlarge, sides to multiples of 14, ImageNet
mean/std).

``InputProcessor`` imports torchvision for ``ToTensor``/``Normalize`` only, and PyPI's
torchvision does not import beside the torch build used here. When it is missing, a
stand-in with the same two definitions (``/255`` and ``(x - mean) / std``, as
torchvision documents them) takes its place; the resizing under test is DA3's and
OpenCV's code, untouched.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np


def ensure_torchvision() -> None:
    """torchvision's ``transforms`` as DA3's ``InputProcessor`` uses them, when the real
    one does not import: ``ToTensor`` (``/255``, HWC to CHW) and ``Normalize``
    (``(x - mean) / std``), as torchvision documents them, put in ``sys.modules``."""
    try:
        import torchvision.transforms  # type: ignore[import-not-found]  # noqa: F401
    except Exception:
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        package, transforms = (
            types.ModuleType("torchvision"),
            types.ModuleType("torchvision.transforms"),
        )
        transforms.ToTensor = ToTensor  # type: ignore[attr-defined]
        transforms.Normalize = Normalize  # type: ignore[attr-defined]
        transforms.CenterCrop = CenterCrop  # type: ignore[attr-defined]
        package.transforms = transforms  # type: ignore[attr-defined]
        sys.modules.update({"torchvision": package, "torchvision.transforms": transforms})


class ToTensor:
    def __call__(self, pic: Any) -> Any:
        import torch

        array = np.array(pic, dtype=np.uint8, copy=True)
        return torch.from_numpy(array).permute(2, 0, 1).contiguous().float().div(255)


class Normalize:
    def __init__(self, mean: Any, std: Any) -> None:
        import torch

        self.mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(std, dtype=torch.float32)[:, None, None]

    def __call__(self, tensor: Any) -> Any:
        return tensor.sub(self.mean).div(self.std)


class CenterCrop:
    def __init__(self, size: Any) -> None:
        raise NotImplementedError("not needed for single images")


def main(argv: list[str]) -> int:
    inputs, outputs = Path(argv[0]), Path(argv[1])
    size = int(argv[2]) if len(argv) > 2 else 504
    ensure_torchvision()
    from depth_anything_3.utils.io.input_processor import InputProcessor

    processor = InputProcessor()
    results = {}
    with np.load(inputs) as data:
        for key in data.files:
            tensor, _, _, _ = processor._process_one(
                data[key], process_res=size, process_res_method="upper_bound_resize"
            )
            results[key] = tensor.numpy().astype(np.float32)
    np.savez(outputs, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

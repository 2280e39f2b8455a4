"""Pre- and post-processing as ExecuTorch programs (``.pte``, XNNPACK delegate).

The Arm-style pipeline: the stages around the LiteRT core run as ExecuTorch programs.
Per core shape (h, w):

- ``da3-small_pre_<h>x<w>.pte``: (1, H, W, 3) float32 RGB in 0..255, any H, W up to
  ``MAX_SIDE`` -> (1, 3, h, w) ImageNet-normalised. HWC -> CHW permute, an
  anti-aliased bilinear resize (the closest ExecuTorch has to DA3's area shrink), and
  the normalisation.
- ``da3-small_post_<h>x<w>.pte``: depth and confidence stacked (1, 2, h, w) and a
  (1, H, W) shape carrier -> (1, 2, H, W) bilinear, H, W up to ``MAX_SIDE``.

What stays in numpy (it lowers badly or not at all, measured with executorch 1.5.1):
the uint8 -> float cast (casts are not delegated), colour lookup and min/max
normalisation for the PNGs, and any integer pre-shrink of images over ``MAX_SIDE``.
Dynamic sizes are memory-planned at their upper bound, so the bound is what it costs:
at 2048 a side the planned buffers are ~100 MB, at 8192 they were ~2.5 GB.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from edge.stages import MEAN, STD
from edge.stages.executorch import MAX_SIDE  # the runtime's bound is the programs' bound


class Pre(torch.nn.Module):
    def __init__(self, height: int, width: int) -> None:
        super().__init__()
        self.size = (height, width)
        std = torch.tensor(STD)
        self.register_buffer("scale", (1.0 / (255.0 * std)).view(1, 3, 1, 1))
        self.register_buffer("shift", (torch.tensor(MEAN) / std).view(1, 3, 1, 1))

    def forward(self, rgb: torch.Tensor) -> torch.Tensor:
        x = rgb.permute(0, 3, 1, 2)
        x = F.interpolate(x, size=self.size, mode="bilinear", align_corners=False, antialias=True)
        return x * self.scale - self.shift


class Post(torch.nn.Module):
    def forward(self, depth_conf: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        size = (like.shape[1], like.shape[2])
        return F.interpolate(depth_conf, size=size, mode="bilinear", align_corners=False)


def _lower(module: torch.nn.Module, args: tuple[torch.Tensor, ...], dynamic: object) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torch.export import export

    program = export(module.eval(), args, dynamic_shapes=dynamic)
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    return bytes(lowered.to_executorch().buffer)


def _dims() -> tuple[object, object]:
    from torch.export import Dim

    return Dim("H", min=2, max=MAX_SIDE), Dim("W", min=2, max=MAX_SIDE)


def pre_program(shape: tuple[int, int]) -> bytes:
    h_dim, w_dim = _dims()
    sample = torch.rand(1, 2 * shape[0], 2 * shape[1], 3) * 255
    return _lower(Pre(*shape), (sample,), ({1: h_dim, 2: w_dim},))


def post_program(shape: tuple[int, int]) -> bytes:
    h_dim, w_dim = _dims()
    sample = torch.rand(1, 2, *shape)
    like = torch.zeros(1, 3 * shape[0], 3 * shape[1])
    return _lower(Post(), (sample, like), (None, {1: h_dim, 2: w_dim}))


def check(path: Path, kind: str, shape: tuple[int, int]) -> float:
    """Run a written program with the ExecuTorch runtime against eager PyTorch on
    odd-sized inputs; return the max abs difference."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    program = _load_for_executorch(str(path))
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        if kind == "pre":
            module: torch.nn.Module = Pre(*shape)
            for size in ((3 * shape[0] + 5, 3 * shape[1] + 1), (shape[0] // 2 + 3, shape[1] - 7)):
                x = torch.rand(1, *size, 3, generator=gen) * 255
                worst = max(worst, float((program.forward([x])[0] - module(x)).abs().max()))
        else:
            module = Post()
            x = torch.rand(1, 2, *shape, generator=gen) + 0.5
            for size in ((401, 599), (shape[0] + 1, shape[1] * 2)):
                like = torch.zeros(1, *size)
                worst = max(
                    worst, float((program.forward([x, like])[0] - module(x, like)).abs().max())
                )
    return worst
